"""``python -m drover.faults``: one fault-injection scenario, checked; ``... soak``: a soak run.

See docs/reliability.md.
"""

from __future__ import annotations

import sys

if sys.argv[1:2] == ["soak"]:
    from drover.faults.soak.run import main as soak_main

    sys.exit(soak_main(sys.argv[2:]))

from drover.faults.suite.run import main

sys.exit(main())
