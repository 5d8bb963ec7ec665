"""The application the deployment files next to this package run (see docs/deployment.md)."""

from __future__ import annotations
