"""Doctor tests reuse the toy workload of the executor tests (a real process, fast)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "execute"))
