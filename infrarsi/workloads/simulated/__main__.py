"""``python -m infrarsi.workloads.simulated``: one simulated training run (see :mod:`.process`)."""

import sys

from .process import main

sys.exit(main())
