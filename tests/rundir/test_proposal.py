"""Proposal (infrarsi/trial/proposal.py): what a record holds, written and read back -- as a value, and in the run
directory's records that keep it (a trial's proposal.json, the pending proposals, search.json, verification.json)."""

import json

import pytest
from pydantic import ValidationError

from infrarsi.errors import RecordError
from infrarsi.rundir import RunDir
from infrarsi.testing.recorded_run import cached_recorded_run, copy_run
from infrarsi.trial import Proposal


@pytest.fixture
def run_dir(tmp_path_factory, tmp_path):
    return copy_run(cached_recorded_run(tmp_path_factory.getbasetemp()), tmp_path / "project")


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


def test_a_trial_proposal_and_the_pending_ones_as_an_older_run_wrote_them_read_and_are_written_back_as_they_were(run_dir):
    run = RunDir(run_dir)
    # as the run stage wrote them before the type: json.dumps(dict, indent=2, sort_keys=True), with a key it dropped since
    old = {"arm": "global", "ei": 0.02, "kind": "acquisition", "p_oom": 0.03, "predicted_s": 13.5, "rerun_of": 4}
    text = json.dumps(old, indent=2, sort_keys=True)
    run.write(run.trial_file(3, "proposal.json"), text)
    why = run.proposal(3)
    assert (why.kind, why.rerun_of, why.savers) == ("acquisition", 4, [])
    run.write_proposal(3, why)
    assert run.trial_file(3, "proposal.json").read_text() == text
    key = json.dumps({"mbs": 4})
    run.write(run.file(run.PENDING), json.dumps({key: old}, indent=2, sort_keys=True))
    assert run.pending() == {key: why}
    before = run.file(run.PENDING).read_bytes()
    run.write_pending(run.pending())
    assert run.file(run.PENDING).read_bytes() == before
    run.write(run.trial_file(3, "proposal.json"), json.dumps({"ei": 0.1}))  # no kind: named, never guessed
    with pytest.raises(RecordError, match="proposal.json"):
        run.proposal(3)


def test_the_search_and_verification_records_keep_an_older_proposals_keys_and_a_candidate_proposed_by_no_one(run_dir):
    run = RunDir(run_dir)
    search = json.loads(run.file(run.SEARCH).read_bytes())
    tid = next(iter(search["proposals"]))
    search["proposals"][tid] = {"kind": "local", "ei": 0.2, "arm": "local", "savers": ["recompute=full"]}
    run.write(run.file(run.SEARCH), json.dumps(search, indent=2))
    rec = run.search()
    assert rec.proposals[tid] == Proposal(kind="local", ei=0.2, savers=["recompute=full"], arm="local")
    run.write_search(rec)
    assert json.loads(run.file(run.SEARCH).read_bytes())["proposals"][tid] == {
        "kind": "local", "ei": 0.2, "savers": ["recompute=full"], "arm": "local"}  # fields first, then the unknown key
    before = run.file(run.VERIFICATION).read_bytes()
    ver = run.verification()
    assert [c.why for c in ver.candidates] == [Proposal(kind="top")] * len(ver.candidates)
    bare = ver.model_copy(update={"candidates": [c.model_copy(update={"why": None}) for c in ver.candidates]})
    run.write_verification(bare)  # a candidate this tuner did not propose (told after a resume): {} on disk, as before
    assert all(c["why"] == {} for c in json.loads(run.file(run.VERIFICATION).read_bytes())["candidates"])
    assert all(c.why is None for c in run.verification().candidates)
    run.write_verification(ver)
    assert run.file(run.VERIFICATION).read_bytes() == before
