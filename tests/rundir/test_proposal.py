"""Proposal (infrarsi/trial/proposal.py): what a record holds, written and read back."""

import json

import pytest
from pydantic import ValidationError

from infrarsi.trial import Proposal


def test_the_serializer_round_trips_and_writes_the_fields_in_order_without_the_empty_ones():
    paired = Proposal(kind="paired", ei=0.05, p_oom=0.1, predicted_s=12.5, paired_from={"mbs": 8, "recompute": False},
                      savers=["recompute=True"], rerun_of=7)
    assert list(paired.to_dict()) == ["kind", "ei", "p_oom", "predicted_s", "paired_from", "savers", "rerun_of"]
    design = Proposal(kind="design", p_oom=0.0, p_drift=None, predicted_s=1.5)
    assert design.to_dict() == {"kind": "design", "p_oom": 0.0, "predicted_s": 1.5}  # 0.0 is a figure, kept
    for p in (paired, design, Proposal(kind="resumed")):
        assert Proposal.read(json.loads(json.dumps(p.to_dict()))) == p
        assert json.loads(p.model_dump_json()) == p.to_dict()


def test_an_older_record_with_a_key_the_model_does_not_name_still_reads_and_is_written_back_as_read():
    old = {"ei": 0.01, "kind": "acquisition", "p_oom": 0.2, "predicted_s": 3.0, "arm": "global", "note": None}
    p = Proposal.read(old)
    assert (p.kind, p.ei, p.p_oom, p.predicted_s, p.savers) == ("acquisition", 0.01, 0.2, 3.0, [])
    assert p.to_dict() == old  # the unknown keys kept, None included: a record is never trimmed of what it held
    assert list(p.to_dict())[-2:] == ["arm", "note"]


def test_a_record_without_a_kind_is_refused_naming_the_field():
    with pytest.raises(ValidationError, match="kind"):
        Proposal.read({"ei": 0.1})
    with pytest.raises(ValidationError, match="frozen"):
        Proposal(kind="design").kind = "local"
