"""``python -m faults``: one fault-injection scenario, checked; ``... soak``: a soak run.

Run from the root of a clone of drover (docs/reliability.md).
"""

from __future__ import annotations

import sys

if sys.argv[1:2] == ["soak"]:
    from faults.soak.run import main as soak_main

    sys.exit(soak_main(sys.argv[2:]))

from faults.suite.run import main

sys.exit(main())
