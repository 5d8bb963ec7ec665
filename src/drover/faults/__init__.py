"""Fault-injection harness: workload, nemesis and history checker (see docs/reliability.md)."""

from __future__ import annotations

__all__: list[str] = []
