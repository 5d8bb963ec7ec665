"""The kernel conformance suite (a package, so that its conftest has a module name of its own)."""

from __future__ import annotations
