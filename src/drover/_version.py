"""The installed version, read once from the distribution's metadata (a leaf module)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["DISTRIBUTION", "VERSION"]

DISTRIBUTION = "drover-queue"
"""The distribution's name on PyPI; the import package and the command are ``drover``
(ADR 0019 says why they differ)."""

try:
    VERSION = version(DISTRIBUTION)
except PackageNotFoundError:  # a bare checkout on sys.path, not installed
    VERSION = "0+unknown"
"""``drover.__version__``: what clients register and ``drover version`` prints."""
