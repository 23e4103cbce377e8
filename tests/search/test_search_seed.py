"""The run stage's search seed: recorded by the first run of a run directory, kept by every resume, and a resume
that asks for another one is refused (with nothing recorded lost)."""

from __future__ import annotations

import pytest

from infrarsi.rundir import RunDir
from infrarsi.stages import run_state


def test_seed_is_recorded_kept_and_a_different_one_refused(tmp_path):
    assert run_state.search_seed(tmp_path, 3) == 3
    assert run_state.search_seed(tmp_path, None) == 3  # a resume without --seed continues with it
    assert run_state.search_seed(tmp_path, 3) == 3
    run_state.mark_done(tmp_path, "search", trials=5)
    with pytest.raises(ValueError, match=r"--seed 4: .*started with seed 3; resume with --seed 3"):
        run_state.search_seed(tmp_path, 4)
    body = RunDir(tmp_path).stages()
    assert body.search_seed == 3 and body.search.trials == 5


def test_default_seed_is_zero(tmp_path):
    assert run_state.search_seed(tmp_path, None) == 0
    with pytest.raises(ValueError):
        run_state.search_seed(tmp_path, 1)
