"""Candidates load by file path; ops are named by their folder."""

from __future__ import annotations

import pytest
import torch

from infrarsi.kernels.loader import OPS, list_candidates, load_candidate, load_reference, op_of

from .conftest import ADVERSARIAL


@pytest.mark.parametrize("op", OPS)
def test_every_op_has_a_reference_and_several_candidates(op):
    cands = list_candidates(op)
    assert len(cands) >= 2 and all(op_of(p) == op for p in cands)
    assert all(p.name != "reference.py" for p in cands)
    ref = load_reference(op)
    assert callable(ref.forward) and set(ref.TOLERANCES) == set(ref.DTYPES)


def test_op_of_rejects_unknown_folder():
    with pytest.raises(ValueError, match="--op"):
        op_of(ADVERSARIAL / "racy.py")


def test_load_candidate_by_path_runs_on_cpu():
    mod = load_candidate(list_candidates("swiglu")[0])
    g, u = torch.randn(3, 40), torch.randn(3, 40)
    torch.testing.assert_close(mod.forward(g, u), load_reference("swiglu").forward(g, u))


def test_load_candidate_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_candidate(tmp_path / "nope.py")


@pytest.mark.parametrize("op", OPS)
def test_reference_inputs_are_random_and_cover_the_families(op):
    ref = load_reference(op)
    for family in ref.FAMILIES:
        for dtype in ref.DTYPES:
            a1, _ = ref.inputs(family, dtype, seed=1)
            a2, _ = ref.inputs(family, dtype, seed=2)
            floats = [t for t in a1 if torch.is_tensor(t) and t.is_floating_point()]
            assert floats and all(t.float().std() > 0 for t in floats if t.numel() > 1)  # never constant
            assert not torch.equal(a1[0], a2[0])  # seeds matter
            assert a1[0].requires_grad
            if family == "noncontig":
                assert not a1[0].is_contiguous()
