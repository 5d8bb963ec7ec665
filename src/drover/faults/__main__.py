"""``python -m drover.faults``: drover's own fault suite moved out of the package (ADR 0049).

It says where the suite and the soak are now, and which command runs your
own handlers under faults, and exits 2.
"""

from __future__ import annotations

import sys

MOVED = """\
drover's own fault suite and soak are not in the installed package (ADR 0049).
From a clone of drover's repository, at its root:

    python -m faults --jobs 5000 --faults 30     the fault suite
    python -m faults soak                        the soak

To run your own handlers under faults: drover faults --app module:attr
(docs/your-handlers-under-faults.md)."""

print(MOVED, file=sys.stderr)
sys.exit(2)
