"""TrialStatus: one vocabulary of a trial's state for the executor, the search, the report and the bank.

Its helpers' truth table; the edge where a string becomes a member (Outcome, Bank.trials), with one-line errors;
records on disk keep their strings (run directory and bank); and no code compares a trial's status to a string.
"""

from __future__ import annotations

import io
import json
import re
import sqlite3
import tokenize
from pathlib import Path

import pytest

from infrarsi.bank import Bank
from infrarsi.execute.record import RunRecord
from infrarsi.trial import Cost, Metrics, Trial
from infrarsi.trial import TrialStatus as ReExported
from infrarsi.knobs import Setting
from infrarsi.search import History, Outcome
from infrarsi.stages.run import outcome_of
from infrarsi.trial.status import FINISHED, TrialStatus

S = TrialStatus
ROOT = Path(__file__).resolve().parents[1]
A100 = {"kind": "A100-80GB", "devices": 8, "memory_capacity_gib": 80, "interconnect": "nvlink"}
LLAMA8B = {"name": "llama3-8b", "framework": "megatron", "num_layers": 32, "hidden_size": 4096,
           "num_attention_heads": 32, "num_query_groups": 8, "ffn_hidden_size": 14336, "vocab_size": 128256,
           "seq_length": 8192, "global_batch_size": 256}

# status: (is_finished, is_failure, ran, is_memory_evidence)
TRUTH = {
    S.RUNNING: (False, False, False, False),
    S.OK: (True, False, True, True),
    S.OOM: (True, True, False, True),
    S.TIMEOUT: (True, True, False, False),
    S.CRASH: (True, True, False, False),
    S.CONTRACT_VIOLATION: (True, True, False, False),
    S.NUMERICS_DRIFT: (True, True, True, True),
    S.INVALID: (True, True, False, False),
    S.CANCELLED: (True, True, False, False),
    S.PRUNED: (True, False, False, True),  # stopped to save time: a lower bound on its step time; it fit in memory
    S.SKIPPED: (True, False, False, True),  # never launched: its estimate says peak > capacity (censored, as an OOM)
}


def test_helpers_truth_table():
    assert set(TRUTH) == set(TrialStatus)  # a new status must be placed in the table
    got = {s: (s.is_finished(), s.is_failure(), s.ran(), s.is_memory_evidence()) for s in TrialStatus}
    assert got == TRUTH
    assert FINISHED == tuple(s for s in TrialStatus if s is not S.RUNNING)
    assert ReExported is TrialStatus  # `from infrarsi.trial import TrialStatus` keeps working


def test_pruned_carries_its_lower_bound_and_skipped_no_time():
    assert S.PRUNED.step_time_error(None) and S.PRUNED.step_time_error(0.0) and S.PRUNED.step_time_error(0.2) is None
    assert S.SKIPPED.step_time_error(0.2) and S.SKIPPED.step_time_error(None) is None
    assert S.SKIPPED.over_capacity() and S.OOM.over_capacity() and not S.PRUNED.over_capacity()
    assert [s for s in S if s.saved()] == [S.PRUNED, S.SKIPPED]
    assert Outcome("pruned", step_time_s=0.3).status is S.PRUNED
    with pytest.raises(ValueError, match="a pruned trial needs a finite step_time_s"):
        Outcome("pruned")


def test_a_member_is_its_string_on_disk_and_in_text():
    assert S.OOM == "oom" and hash(S.OOM) == hash("oom") and {"oom": 1}[S.OOM] == 1
    assert str(S.NUMERICS_DRIFT) == f"{S.NUMERICS_DRIFT}" == "numerics_drift"
    assert json.dumps({"status": S.OK}) == '{"status": "ok"}'


def test_parse_takes_a_member_or_its_string_and_refuses_the_rest_in_one_line():
    assert S.parse("oom") is S.OOM and S.parse(S.CRASH) is S.CRASH
    for bad in ("OOM", "exploded", 3, None, ["ok"]):
        with pytest.raises(ValueError) as e:
            S.parse(bad, field="Outcome.status")
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"Outcome.status={bad!r}: use one of running, ok, oom, ")
    with pytest.raises(ValueError, match=r"^status='running': use one of ok, oom, timeout, crash, contract_violation, "
                                         r"numerics_drift, invalid, cancelled, pruned, skipped$"):
        S.parse(S.RUNNING, allowed=FINISHED)


def test_outcome_takes_strings_and_members_alike():
    assert Outcome("oom") == Outcome(S.OOM) and Outcome("oom").status is S.OOM
    ok = Outcome(status="ok", step_time_s=1.5, peak_memory_bytes=7e10)
    assert ok == Outcome(S.OK, 1.5, 7e10) and ok.status is S.OK and ok.status.ran()
    drift = Outcome("numerics_drift", peak_memory_bytes=1e9)
    assert drift.status is S.NUMERICS_DRIFT and drift.status.is_memory_evidence()


@pytest.mark.parametrize("kwargs, expect", [
    ({"status": "exploded"}, "Outcome.status='exploded': use one of ok, oom, timeout, crash, contract_violation, "
                             "numerics_drift, invalid, cancelled"),
    ({"status": "running"}, "Outcome.status='running': use one of ok, oom,"),  # a tuner is told finished trials only
    ({"status": "ok"}, "Outcome(status='ok'): an ok trial needs a finite step_time_s > 0, got None; report a run "
                       "without a step time as crash"),
    ({"status": S.OOM, "step_time_s": 2.0}, "Outcome(status='oom'): an oom trial has no step_time_s (got 2.0)"),
])
def test_outcome_refuses_a_bad_status_in_one_line_naming_the_field(kwargs, expect):
    with pytest.raises(ValueError) as e:
        Outcome(**kwargs)
    assert "\n" not in str(e.value) and str(e.value).startswith(expect)


def test_trial_and_outcome_share_one_step_time_rule():
    with pytest.raises(ValueError, match=r"trial 7: an ok trial needs a finite metrics\.step_time_s > 0, got nan"):
        Trial(id=7, setting={}, status="ok", metrics=Metrics(step_time_s=float("nan")))
    with pytest.raises(ValueError, match=r"trial 8: an oom trial has no metrics\.step_time_s \(got 1\.0\)"):
        Trial(id=8, setting={}, status=S.OOM, metrics=Metrics(step_time_s=1.0))


def test_every_status_round_trips_through_the_run_record_and_reaches_the_tuner(tmp_path):
    rec = RunRecord(tmp_path / "run")
    for i, st in enumerate(FINISHED):
        t = rec.start({"mbs": i})
        m = Metrics(step_time_s=0.5 if st in (S.OK, S.PRUNED) else None,
                    peak_memory_bytes=None if st.over_capacity() else 1e9)
        rec.finish(t.model_copy(update={"status": st, "metrics": m, "cost": Cost(wall_s=1.0)}))
    for i, st in enumerate(FINISHED):  # on disk: the plain string, as every earlier version wrote it
        raw = json.loads((rec.trial_dir(i) / "trial.json").read_text())
        assert raw["status"] == st.value and type(raw["status"]) is str
    back = RunRecord(tmp_path / "run").trials()
    assert [t.status for t in back] == list(FINISHED) and all(type(t.status) is TrialStatus for t in back)
    # a record in the format earlier versions wrote reads back as the member
    old = Trial.model_validate_json('{"id": 3, "setting": {}, "status": "numerics_drift"}')
    assert old.status is S.NUMERICS_DRIFT

    h = History()
    for t in back:
        h.add(Setting(t.setting), outcome_of(t))
    assert [o.status for _, o in h] == list(FINISHED)
    assert [o.status for _, o in h.ran()] == [S.OK, S.NUMERICS_DRIFT]
    assert [o.status for _, o in h.memory_rows()] == [S.OK, S.OOM, S.NUMERICS_DRIFT, S.PRUNED, S.SKIPPED]
    assert [o.status for _, o in h.ok()] == [S.OK]
    assert [(o.status, o.step_time_s) for _, o in h.lower_bounds()] == [(S.PRUNED, 0.5)]  # told as a lower bound


def test_the_bank_stores_the_string_and_filters_by_member_or_string(tmp_path):
    bank = Bank(tmp_path / "bank.sqlite")
    trials = [Trial(id=0, setting={"mbs": 1}, status=S.OK, metrics=Metrics(step_time_s=1.0)),
              Trial(id=1, setting={"mbs": 8}, status="oom"),
              Trial(id=2, setting={"mbs": 2}, status=S.NUMERICS_DRIFT),
              Trial(id=3, setting={"mbs": 4}, status=S.PRUNED, metrics=Metrics(step_time_s=0.5)),  # a lower bound
              Trial(id=4, setting={"mbs": 16}, status=S.SKIPPED)]
    assert bank.add_trials("r", trials, hardware=A100, workload=LLAMA8B) == 5
    with sqlite3.connect(bank.path) as c:
        assert c.execute("SELECT status FROM trials ORDER BY trial_id").fetchall() == [("ok",), ("oom",),
                                                                                        ("numerics_drift",),
                                                                                        ("pruned",), ("skipped",)]
    c.close()
    assert [st.trial.id for st in bank.trials("r", status="oom")] == [1]
    assert [st.trial.id for st in bank.trials("r", status=S.NUMERICS_DRIFT)] == [2]
    (run,) = bank.runs()
    assert run.n_ok == 1 and run.best_step_time_s == 1.0  # a pruned trial's bound is never a best
    assert [st.trial.metrics.step_time_s for st in bank.trials("r", status=S.PRUNED)] == [0.5]
    with pytest.raises(ValueError, match=r"^status='OOM': use one of running, ok, oom,"):
        bank.trials("r", status="OOM")


# ---- no string comparison of a trial's status outside infrarsi/trial/status.py
VALUES = "|".join(s.value for s in TrialStatus)
LIT = r"""[rbuf]?["']"""
PATTERNS = [
    # anything named *status* (a variable, an attribute, its .value, a ["status"] key) against a string literal
    re.compile(r"""status\w*(?:\.value|["']\])?\s*(?:==|!=|\bnot\s+in\b|\bin\b)\s*[(\[{]?\s*""" + LIT),
    re.compile(LIT + r"""\w*["']\s*(?:==|!=)\s*[\w.]*status"""),
    # anything compared to a value only a trial status has
    re.compile(r"""(?:==|!=|\bin\b)\s*[(\[{]?\s*["'](?:ok|oom|numerics_drift|contract_violation)["']"""),
    re.compile(r"""["'](?:ok|oom|numerics_drift|contract_violation)["']\s*(?:==|!=)"""),
    # a string set of statuses (RAN = ("ok", "numerics_drift")) or a dict keyed by them ({"ok": "green"})
    re.compile(rf"""[(\[{{]\s*["'](?:{VALUES})["']\s*,\s*["'](?:{VALUES})["']"""),
    re.compile(r"""[{,]\s*["'](?:ok|oom|numerics_drift|contract_violation)["']\s*:"""),
]


def _code(text: str) -> str:
    """``text`` without its comments (a comment may mention statuses in prose); line numbers kept."""
    lines = text.splitlines(keepends=True)
    for tok in reversed(list(tokenize.generate_tokens(io.StringIO(text).readline))):
        if tok.type == tokenize.COMMENT:
            (r, c), (_, e) = tok.start, tok.end
            lines[r - 1] = lines[r - 1][:c] + lines[r - 1][e:]
    return "".join(lines)


def string_status_comparisons(text: str) -> list[int]:
    """Line numbers (1-based) in Python source ``text`` where a trial's status meets a string."""
    code = _code(text)
    return sorted({code.count("\n", 0, m.start()) + 1 for p in PATTERNS for m in p.finditer(code)})


@pytest.mark.parametrize("line", [
    'ok = [r for r in fit.memory if r.status == "ok"]',
    "n = sum(r.status == 'oom' for r in rows)",
    'if t.status.value != "ok" or not m.step_time_s:',
    'if o.status in ("ok", "numerics_drift"):',
    'if o.status not in STATUSES and "x":',  # not a literal: allowed ...
    'ok = [r for r in rows if r["status"] == "ok"]',
    'if "oom" == o.status:',
    'mem = peak if st == "ok" else None',
    'RAN = ("ok", "numerics_drift")  # statuses of a trial that ran',
    'color = {"ok": "green", "oom": "red"}.get(st, "yellow")',
])
def test_the_scan_catches_each_form_of_a_string_status(line):
    caught = string_status_comparisons(line + "\n")
    assert caught == ([] if "STATUSES" in line else [1]), line


def test_the_scan_leaves_members_helpers_and_comments_alone():
    src = ('if o.status is TrialStatus.OOM or o.status.ran():  # an "oom" == status in prose\n'
           'x = Outcome("oom")\n'
           'state == "TIMEOUT" or why == "timeout"\n')
    assert string_status_comparisons(src) == []


def test_no_string_status_comparison_outside_the_status_module():
    offenders = []
    for base in ("infrarsi", "scripts"):
        for p in sorted((ROOT / base).rglob("*.py")):
            if p == ROOT / "infrarsi" / "trial" / "status.py":
                continue
            offenders += [f"{p.relative_to(ROOT)}:{n}" for n in string_status_comparisons(p.read_text())]
    assert offenders == [], ("compare TrialStatus members (status is TrialStatus.OOM) or ask a helper "
                             f"(status.ran(), status.is_memory_evidence()), not strings: {offenders}")
