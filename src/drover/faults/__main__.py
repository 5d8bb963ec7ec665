"""``python -m drover.faults``: one fault-injection scenario, checked (see docs/reliability.md)."""

from __future__ import annotations

import sys

from drover.faults.suite.run import main

sys.exit(main())
