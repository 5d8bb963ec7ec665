"""``python -m drover``: the operator CLI."""

from __future__ import annotations

from drover.cli.app import main

if __name__ == "__main__":
    main()
