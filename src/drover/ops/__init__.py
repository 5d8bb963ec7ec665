"""Observability at the edge: Prometheus metrics and the ops HTTP endpoints.

The core loop never imports prometheus_client; the client builds these
objects and hands the metrics middleware to the chain.
"""
