"""Candidates load by file path (FILE or FILE@VARIANT); ops are named by their folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from infrarsi.kernels.loader import (KERNELS_ROOT, OPS, CandidateError, list_candidates, load_candidate, load_reference,
                                     op_of, parse_candidate, spec_key, split_spec)

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


# ------------------------------------------------------------------------------- variants: FILE@VARIANT
RMSNORM = KERNELS_ROOT / "rmsnorm" / "triton_rows.py"


def _family(tmp_path, variants: str, name: str = "fam.py"):
    """A copy of the shipped RMSNorm file under tmp_path/rmsnorm/ whose VARIANTS line is ``variants``."""
    src = RMSNORM.read_text()
    line = next(ln for ln in src.splitlines() if ln.startswith("VARIANTS = "))
    path = tmp_path / "rmsnorm" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(src.replace(line, variants) if variants else src.replace(line + "\n", ""))
    return path


def test_list_candidates_names_every_variant_of_a_file_and_a_plain_file_alone(tmp_path):
    (tmp_path / "rmsnorm").mkdir()
    shutil.copy(KERNELS_ROOT / "rmsnorm" / "reference.py", tmp_path / "rmsnorm" / "reference.py")
    shutil.copy(RMSNORM, tmp_path / "rmsnorm" / "a_rows.py")
    _family(tmp_path, "", name="b_plain.py")
    got = list_candidates("rmsnorm", tmp_path)
    assert [c.name for c in got] == ["a_rows.py@rows4", "a_rows.py@rows16", "b_plain.py"]
    assert [c.spec for c in got] == [f"{tmp_path}/rmsnorm/a_rows.py@rows4", f"{tmp_path}/rmsnorm/a_rows.py@rows16",
                                     f"{tmp_path}/rmsnorm/b_plain.py"]
    assert got[1].settings == (("ROWS_PER_PROGRAM", 16),) and got[2].variant is None
    assert [parse_candidate(c.spec) for c in got] == got  # a listed spec parses back to itself


def test_two_variants_of_one_file_load_as_distinct_modules_with_their_constants():
    a = load_candidate(f"{RMSNORM}@rows4")
    b = load_candidate(f"{RMSNORM}@rows16")
    plain = load_candidate(RMSNORM)
    assert a is not b and a.__name__ != b.__name__ and a._RMSNormFunction is not b._RMSNormFunction
    assert (a.ROWS_PER_PROGRAM, b.ROWS_PER_PROGRAM, plain.ROWS_PER_PROGRAM) == (4, 16, 4)
    # the host's settings function reads the module's constants when it launches: (rows, BLOCK_N, programs)
    assert a._settings(100, 64) == (4, 64, 25) and b._settings(100, 64) == (16, 64, 7)
    again = load_candidate(f"{RMSNORM}@rows4")  # each load is a module of its own: no shared state
    again.ROWS_PER_PROGRAM = 2
    assert a.ROWS_PER_PROGRAM == 4 and a._settings(100, 64) == (4, 64, 25)
    x, w = torch.randn(37, 64), torch.randn(64)
    want = load_reference("rmsnorm").forward(x, w, 1e-6)
    for mod in (a, b, again):
        torch.testing.assert_close(mod.forward(x, w, 1e-6), want)


def test_split_spec_reads_text_only():
    assert split_spec("kernels/rmsnorm/triton_rows.py@rows16") == ("kernels/rmsnorm/triton_rows.py", "rows16")
    assert split_spec("kernels/rmsnorm/triton_rows.py") == ("kernels/rmsnorm/triton_rows.py", None)
    assert split_spec("/home/u@host/k/rmsnorm/x.py") == ("/home/u@host/k/rmsnorm/x.py", None)  # "@" in a folder
    assert split_spec("/home/u@host/k/rmsnorm/x.py@v1") == ("/home/u@host/k/rmsnorm/x.py", "v1")
    assert spec_key("kernels/../kernels/rmsnorm/x.py@v1") == f"{Path('kernels/rmsnorm/x.py').resolve()}@v1"


@pytest.mark.parametrize("variants, value, words", [
    # a variant the file does not declare: the ones it has, and the file alone
    (None, "@rows8", ["has no variant 'rows8'", "use one of rows4, rows16", "alone"]),
    # a variant of a file without VARIANTS
    ("", "@rows4", ["declares no VARIANTS", "name the file alone"]),
    # a setting of something that is not one of the module's constants
    ('VARIANTS = {"fast": {"ROWS": 8}}', "@fast", ["sets 'ROWS'", "not one of the module's constants",
                                                   "MAX_BLOCK_N, ROWS_PER_PROGRAM", "add `ROWS = <default>`"]),
    # a value of another type than the constant's default
    ('VARIANTS = {"fast": {"ROWS_PER_PROGRAM": "8"}}', "@fast", ["['fast']['ROWS_PER_PROGRAM'] = '8' is a str",
                                                                 "default 4 is an int", "write an int"]),
    ('VARIANTS = {"fast": {"ROWS_PER_PROGRAM": True}}', "@fast", ["= True is a bool", "write an int"]),
    # VARIANTS that is not plain data
    ('VARIANTS = dict(fast={"ROWS_PER_PROGRAM": 8})', "@fast", ["must be a non-empty literal dict",
                                                                "write it as plain data"]),
    # not a variant name
    (None, "@rows-4", ["'rows-4' is not a variant name", "PATH@VARIANT"]),
])
def test_a_bad_variant_is_one_line_naming_the_value_and_the_fix(tmp_path, variants, value, words):
    path = _family(tmp_path, variants) if variants is not None else _family(tmp_path, next(
        ln for ln in RMSNORM.read_text().splitlines() if ln.startswith("VARIANTS = ")))
    spec = f"{path}{value}"
    for call in (parse_candidate, load_candidate):
        with pytest.raises(CandidateError) as e:
            call(spec)
        msg = str(e.value)
        assert "\n" not in msg and f"kernel candidate {spec!r}" in msg, msg
        assert all(w in msg for w in words), msg


def test_a_variant_of_a_missing_file_is_refused(tmp_path):
    with pytest.raises(CandidateError, match="no such file"):
        parse_candidate(f"{tmp_path}/rmsnorm/nope.py@rows4")
