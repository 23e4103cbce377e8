"""`infrarsi report` on a recorded run: sections, numbers traced to trials, the audit, MFU."""

import dataclasses
import hashlib
import json
import math
import re
import statistics

import pytest

from infrarsi.execute.record import RunRecord
from infrarsi.report import load_run
from infrarsi.report.audit import scope_glob
from infrarsi.report.mfu import flops_per_step
from infrarsi.report.render import build, to_markdown
from infrarsi.stages import report as stage
from infrarsi.testing.recorded_run import KERNEL, KERNEL_SPEC

SECTIONS = ["## Summary", "## Baseline and noise", "## Trials", "## Models: predicted vs observed",
            "## Pre-flight memory estimate vs measured", "## Knob effects (posteriors)", "## Priors vs posteriors",
            "## Verification", "## MFU", "## Failed trials: cost", "## Source-path audit"]


def test_report_sections_and_numbers(reported_run):
    run_dir, printed = reported_run
    md = (run_dir / "report.md").read_text()
    for s in SECTIONS:
        assert s in md, s
    ver = json.loads((run_dir / "verification.json").read_text())
    best, other = ver["candidates"]
    assert best["promoted"] and not other["promoted"]
    # the speedup, its CI and the pairs it came from
    assert f"**{best['speedup']:.3f}x**" in md
    assert f"[{best['ci95'][0]:.3f}, {best['ci95'][1]:.3f}]" in md
    assert ", ".join(f"{a}/{b}" for a, b in best["trials"]) in md
    # every trial appears in the trial table with its status; failures marked
    trials = RunRecord(run_dir).trials()
    for t in trials:
        status = t.status.value.upper() if t.status.is_failure() else "ok"
        assert re.search(rf"^\| {t.id} \| {t.role} \| {status} \|", md, re.M), t.id
    # failed-trial cost per kind, recomputed from the trials on disk
    for kind in ("oom", "crash", "timeout"):
        ids = [t.id for t in trials if t.status.value == kind]
        cost = sum(t.cost.device_s for t in trials if t.status.value == kind)
        assert ids
        assert f"| {kind.upper()} | [{', '.join(map(str, ids))}] | {cost:.1f} |" in md
    # the miscalibrated prior is called out
    assert "**bf16=True** (time, llm" in md
    assert "**MISCALIBRATED**" in md
    # MFU before and after with the one formula, recomputed independently
    data = load_run(run_dir)
    flops = flops_per_step(data.contract.workload.args, "minigpt")[0]
    peak = data.contract.hardware.peak_flops
    before = flops / (statistics.median(best["baseline_s"]) * peak)
    after = flops / (statistics.median(best["candidate_s"]) * peak)
    assert f"| {before:.2%} | {after:.2%} |" in md
    assert "6·N·T + 6·L·S²·h·B" in md
    # the audit: the kernel candidate (its file and variant), the file's sha256 now, inside the scope
    sha = hashlib.sha256((run_dir.parent / KERNEL).read_bytes()).hexdigest()
    assert re.search(rf"\| {re.escape(KERNEL_SPEC)} \| rmsnorm \| {sha} \| {sha} \| pass \| inside", md)
    assert "applicable." in md
    # plots: PNG files beside report.md, inline in report.html
    pngs = sorted(p.name for p in (run_dir / "report_files").glob("*.png"))
    assert pngs == sorted(["progress.png", "predicted_vs_observed.png", "memory_boundary.png", "effects.png",
                           "priors.png", "verification.png", "failure_cost.png"])
    html = (run_dir / "report.html").read_text()
    assert html.count("src='data:image/png;base64,iVBORw0KGgo") == 7
    assert f"wrote {run_dir / 'report.md'}" in printed


def test_stale_kernel_is_flagged_in_the_audit(run_dir, consoles):
    (run_dir.parent / KERNEL).write_text((run_dir.parent / KERNEL).read_text() + "\n# edited\n")
    md = to_markdown(build(load_run(run_dir), sections=["audit"]))
    assert "NOT applicable" in md and "changed since it was verified" in md


def test_mfu_unknown_without_peak_flops(run_dir):
    data = load_run(run_dir)
    hw = data.contract.hardware.model_copy(update={"peak_flops": None})
    data = dataclasses.replace(data, contract=data.contract.model_copy(update={"hardware": hw}))
    md = to_markdown(build(data, sections=["verification"]))
    assert "MFU unknown: hardware.peak_flops is unset" in md
    assert "| unknown | unknown |" in md


def test_flop_formula_matches_the_workload():
    from infrarsi.workloads.minigpt import build_model, build_parser, model_flops_per_step

    argv = "--num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 64 --vocab-size 300 --global-batch-size 8"
    args = build_parser().parse_args(argv.split())
    model = build_model(args, {})
    n = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and "embed" not in name)
    flops, n_ours, tokens = flops_per_step(vars(args), "minigpt")
    assert n_ours == n and tokens == 8 * 64
    assert flops == model_flops_per_step(args, n)


def test_scope_glob():
    globs = ["kernels/**/*.py"]
    assert scope_glob("kernels/rmsnorm/triton_rows.py", globs) == "kernels/**/*.py"
    assert scope_glob("tools/fast.py", globs) is None
    assert scope_glob("kernels/../../etc/x.py", globs) is None  # matches the glob as text, leaves the scope
    assert scope_glob("/abs/kernels/a/b.py", globs) is None


def test_report_without_lock_fails_in_one_line(tmp_path, consoles):
    con, err, _, errbuf = consoles
    assert stage.run(tmp_path, console=con, err=err) == 1
    msg = errbuf.getvalue().strip()
    assert "no contract.lock" in msg and "infrarsi init" in msg and "\n" not in msg


def test_cli_report_smoke(run_dir):
    from typer.testing import CliRunner

    from infrarsi.cli import app

    r = CliRunner().invoke(app, ["report", "--run-dir", str(run_dir)])
    assert r.exit_code == 0, r.output
    assert (run_dir / "report.md").is_file() and (run_dir / "report.html").is_file()


def test_report_of_a_run_not_yet_verified(run_dir):
    from infrarsi.rundir import RunDir

    run = RunDir(run_dir)
    run.write(run.file(run.VERIFICATION), None)  # removed as a key holder would: a run stopped before verifying
    md = to_markdown(build(load_run(run_dir), sections=["summary", "verification", "audit"]))
    assert "No verification yet" in md and "Not verified yet" in md and "No promoted candidate" in md


def test_memory_effects_are_whole_effects_that_match_the_known_law(run_dir):
    """The recorded run's trials follow MEM_EFFECT; search.json (written by the run stage's own writer, with
    the analytical estimate on) must report each measured memory effect as itself, not as the model's
    correction on top of the estimate."""
    from infrarsi.report.render import pct
    from infrarsi.testing.recorded_run import MEM_EFFECT

    data = load_run(run_dir)
    models = data.search.models
    assert models.memory_estimate is True
    eff = {e.feature: e for e in models.memory_effects}
    corr = {e.feature: e for e in models.memory_corrections}
    for feature in ("micro_batch_size=4", "micro_batch_size=8", "attention_backend=auto", "bf16=True"):
        truth = MEM_EFFECT[tuple(feature.split("=")[:1]) + ({"True": True, "auto": "auto"}.get(
            feature.split("=")[1], None) or int(feature.split("=")[1]),)]
        e = eff[feature]
        assert e.lo <= truth <= e.hi, (feature, truth, e)
        assert abs(e.mean - truth) < 0.15 and (e.mean > 0) == (truth > 0), (feature, truth, e.mean)
    # micro_batch_size=8 doubles the peak (+112%); the correction alone is far from it
    assert abs(corr["micro_batch_size=8"].mean - MEM_EFFECT[("micro_batch_size", 8)]) > 0.2
    md = to_markdown(build(data, sections=["effects"]))
    e8 = eff["micro_batch_size=8"]
    assert f"| micro_batch_size=8 | {pct(e8.mean):+.1f} | [{pct(e8.lo):+.1f}, {pct(e8.hi):+.1f}]" in md
    assert 90 < pct(e8.mean) < 135
    # priors are revised against whole effects: the offline micro-batch prior was right
    rev = {r.feature: r for r in models.memory_revisions}
    assert not rev["micro_batch_size=16"].miscalibrated


def test_the_report_says_which_models_priced_time_and_the_risk_of_oom(run_dir):
    """The search writes which of its parts ranked step time and priced P(OOM) (search/record.py); the report,
    whose effects are the additive models', says so where it shows the fit, the effects and the estimate."""
    data = load_run(run_dir)
    models = data.search.models
    # the recorded run: the analytical estimate as offset (CensoredPeak), its GP once 3 peaks were measured
    assert models.memory_priced_by == ("the censored GP on the additive model on the pre-flight estimate as offset "
                                       "(search/censored.py)")
    assert "joint GP" in models.time_priced_by
    md = to_markdown(build(data, sections=["models", "estimate", "effects"]))
    assert md.count(f"P(OOM) priced by {models.memory_priced_by}") == 2
    assert f"P(OOM) was priced by {models.memory_priced_by}" in md


def test_a_run_recorded_before_the_models_block_still_reports(run_dir):
    """search.json of schema 1 held the models' fields flat, beside stop_reason: it still loads, typed, and the
    report prints the same effects from it (without the sentence about which model priced what)."""
    from infrarsi.rundir import RunDir

    run = RunDir(run_dir)
    now = json.loads(run.file(run.SEARCH).read_text())
    models = now.pop("models")
    assert models.pop("schema") == 2 and models.pop("time_priced_by") and models.pop("memory_priced_by")
    run.write(run.file(run.SEARCH), json.dumps({**now, **models, "schema": 1}))  # as schema 1 wrote it
    old = load_run(run_dir).search.models
    assert old.schema_ == 1 and old.memory_priced_by == "not recorded"
    assert [e.feature for e in old.time_effects] == [e["feature"] for e in models["time_effects"]]
    assert {e.feature: e.mean for e in old.memory_effects} == {e["feature"]: e["mean"] for e in models["memory_effects"]}
    assert old.fitted.time == {k: tuple(v) for k, v in models["fitted"]["time"].items()}
    md = to_markdown(build(load_run(run_dir), sections=["models", "effects", "priors"]))
    e = old.memory_effects[0]
    assert f"| {e.feature} | {100 * math.expm1(e.mean):+.1f} |" in md and "priced by" not in md


def test_models_section_reads_the_tuners_saved_fit(run_dir):
    """Predicted vs observed comes from search.json's `fitted` block (the tuner's own models), not a refit:
    changing the saved prediction changes the report."""
    from infrarsi.knobs import Setting
    from infrarsi.report.fit import saved_fit
    from infrarsi.rundir import RunDir

    data = load_run(run_dir)
    fit = saved_fit(data)
    first = fit.time[0]
    t = data.by_id[first.trial]
    m, s = data.search.models.fitted.time[Setting(t.setting).key()]
    assert first.mean_s == math.exp(m)
    run = RunDir(run_dir)
    body = run.search()
    body.models.fitted.time[Setting(t.setting).key()] = (m + 1.0, s)
    run.write_search(body)  # as the run stage writes it
    assert saved_fit(load_run(run_dir)).time[0].mean_s == math.exp(m + 1.0)
    run.write_search(body.model_copy(update={"models": body.models.model_copy(update={"fitted": None})}))
    assert saved_fit(load_run(run_dir)) is None
    assert "rerun `infrarsi run`" in to_markdown(build(load_run(run_dir), sections=["models"]))


def test_every_trial_shows_its_preflight_estimate_against_its_measured_peak(run_dir):
    """search.json, written by the run stage's own writer from a real Tuner with the offset the run stage gives
    minigpt (the analytical model), keeps the figure each setting was priced with before it ran; the report
    prints it for every trial beside the measured peak (or OOM, a bound) and their ratio, recomputed here from
    the trials on disk and the analytical model itself."""
    from infrarsi.adapters import get_adapter
    from infrarsi.rundir import RunDir
    from infrarsi.trial import TrialStatus
    from infrarsi.priors.offline import memory_estimator

    MiB = 2**20
    data = load_run(run_dir)
    c = data.contract
    space = get_adapter("minigpt").knob_space(c)
    analytical = memory_estimator(space, workload=dict(c.workload.args), hardware=c.hardware.model_dump())
    cap = c.hardware.memory_capacity_bytes
    md = to_markdown(build(data, sections=["estimate"]))
    seen = {"ok": 0, "oom": 0, "other": 0}
    for t in data.trials:
        e = analytical(space.complete(t.setting))
        peak = t.metrics.peak_memory_bytes
        if t.status is TrialStatus.OK:
            measured, ratio, kind = f"{peak / MiB:.0f}", f"{peak / e:.3f}", "ok"
        elif t.status is TrialStatus.OOM:
            measured, ratio, kind = f"OOM (> {cap / MiB:.0f})", f"> {cap / e:.3f}", "oom"
        else:
            measured, ratio, kind = f"- ({t.status.value})", "-", "other"
        row = (rf"^\| {t.id} \| {t.role} \| [^|]* \| {e / MiB:.0f} \| analytical \| {re.escape(measured)} \| "
               rf"{re.escape(ratio)} \|$")
        assert re.search(row, md, re.M), (t.id, measured, ratio)
        seen[kind] += 1
    assert seen["ok"] > 10 and seen["oom"] >= 2 and seen["other"] >= 2
    # the recorded law's peaks sit above the analytical arithmetic: every OOM's bound says the estimate was short
    assert "Of 2 OOM trials the estimate alone put 2 over capacity." in md
    # the report reads what the run stage saved, nothing recomputed: an older search.json says so
    run = RunDir(run_dir)
    body = run.search()
    body.models.fitted.estimate = {}
    run.write_search(body)
    assert "No pre-flight estimates in `search.json`" in to_markdown(build(load_run(run_dir), sections=["estimate"]))


@pytest.mark.slow
def test_a_run_with_the_fake_step_offset_reports_the_fake_step_figure(tmp_path, monkeypatch):
    """With INFRARSI_MEMORY_OFFSET=estimate the run stage's offset is the real model's fake step; the report
    prints that figure, marked as such, for the trials it priced (minutes: one fake step per memory layout)."""
    from infrarsi.estimate import estimate
    from infrarsi.testing.recorded_run import write_recorded_run

    monkeypatch.setenv("INFRARSI_MEMORY_OFFSET", "estimate")
    data = load_run(write_recorded_run(tmp_path / "project"))
    md = to_markdown(build(data, sections=["estimate"]))
    base = data.trials[0]
    e, peak = estimate(data.contract, base.setting).peak_bytes, base.metrics.peak_memory_bytes
    assert re.search(rf"^\| {base.id} \| doctor \| \(baseline\) \| {e / 2**20:.0f} \| fake step \| "
                     rf"{peak / 2**20:.0f} \| {peak / e:.3f} \|$", md, re.M)


def test_the_summary_says_which_trials_ran_without_isolation(run_dir):
    """A run whose trials ran unisolated (a Slurm node without bwrap): the summary names them and what promotion
    on them needs; with the contract's opt-in it says the contract allows it."""
    data = load_run(run_dir)
    warn = "ran without isolation: the Slurm node has no working bwrap (probe job: no bwrap on node1); ..."
    bare = [t.model_copy(update={"warnings": [warn]}) if t.role == "verify" else t for t in data.trials]
    n = sum(t.role == "verify" for t in data.trials)
    assert n >= 2
    md = to_markdown(build(dataclasses.replace(data, trials=bare), sections=["summary"]))
    assert f"**Isolation:** {n} of {len(bare)} trials ran without isolation" in md
    assert "Promotion on such evidence needs invariants.isolation.allow_unisolated = true" in md
    iso = data.contract.invariants.isolation.model_copy(update={"allow_unisolated": True})
    loose = data.contract.model_copy(update={"invariants": data.contract.invariants.model_copy(update={"isolation": iso})})
    md = to_markdown(build(dataclasses.replace(data, trials=bare, contract=loose), sections=["summary"]))
    assert "The contract allows promotion on such evidence" in md
    assert "**Isolation:**" not in to_markdown(build(data, sections=["summary"]))


def test_the_headline_names_its_statistic_and_its_times_agree_with_it(reported_run):
    """The headline speedup is the geometric mean of the pairs' ratios; the step times beside it are the sides'
    geometric means, whose ratio it is (the medians' ratio is another figure), and the table, plot and summary
    call the interval by one name: 95% CI."""
    run_dir, _ = reported_run
    md = (run_dir / "report.md").read_text()
    m = re.search(r"\*\*([\d.]+)x\*\* as fast as the baseline \(([\d.]+) s -> ([\d.]+) s per step, geometric means "
                  r"of its (\d+) pairs\)", md)
    assert m, md[:2000]
    speedup, base, cand = float(m[1]), float(m[2]), float(m[3])
    assert base / cand == pytest.approx(speedup, rel=2e-3)
    assert "the geometric mean of the pairs' ratios" in md and "| 95% CI |" in md
    assert not re.search(r"\d\.\d+% interval", md) and "medians)" not in md  # the 90% posterior intervals stay


def test_the_best_candidate_is_the_one_with_the_highest_lower_bound():
    """2.718x [1.118, 6.606] against 2.444x [1.343, 4.446]: the second is the one the evidence is surest of; a tie
    on the lower bound goes to the higher point estimate."""
    from infrarsi.report.audit import best_of
    from infrarsi.trial.verified import VerifiedCandidate

    wide = VerifiedCandidate(setting={"a": 1}, promoted=True, reason="", speedup=2.718, ci95=(1.118, 6.606), pairs=3)
    sure = VerifiedCandidate(setting={"a": 2}, promoted=True, reason="", speedup=2.444, ci95=(1.343, 4.446), pairs=5)
    assert best_of([wide, sure]) is sure and best_of([sure, wide]) is sure
    tie = VerifiedCandidate(setting={"a": 3}, promoted=True, reason="", speedup=2.5, ci95=(1.343, 4.0), pairs=5)
    assert best_of([sure, tie]) is tie
    as_json = [{"speedup": 1.292, "ci95": [1.180, 1.414]}, {"speedup": 1.261, "ci95": [1.219, 1.303]}]
    assert best_of(as_json) is as_json[1] and best_of([]) is None


# An LLM prior's rationale as a hostile model (or a poisoned bank) would write it: raw HTML, a javascript: link, an
# image that calls home, a link definition of its own.
HOSTILE = ("<script>alert(1)</script><img src=x onerror=alert(2)> [click](javascript:alert(3)) "
           "![t](http://tracker.example/p.png) <javascript:alert(4)>\n[r]: javascript:alert(5) [go][r]")


def test_untrusted_text_is_inert_in_report_md(run_dir):
    """Issue 66 class 7: report.md is rendered (a repository's web view, an editor's preview); a prior's rationale
    comes from an LLM. Rendered with CommonMark (raw HTML allowed, as many renderers do), no tag, handler or link of
    it is live; its words are still there to read."""
    from markdown_it import MarkdownIt

    from infrarsi.testing.sealed import rewrite_sealed

    search = json.loads((run_dir / "search.json").read_text())
    text = json.dumps(search)
    assert "two cores: intra-op parallelism nearly halves matmul time" in text
    rewrite_sealed(run_dir, "search.json", text.replace("two cores: intra-op parallelism nearly halves matmul time",
                                                        json.dumps(HOSTILE)[1:-1]))
    md = to_markdown(build(load_run(run_dir), sections=["priors"]))
    page = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    assert "<script" not in page and not re.search(r"<a[ >]", page)  # no tag of it, no link at all
    assert re.findall(r"<img [^>]*>", page) == ['<img src="report_files/priors.png" alt="Prior vs posterior, '
                                                'miscalibrated priors in red" />']  # the report's own plot only
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "click" in page  # the words are still there


def test_the_verification_says_what_the_startup_allowance_exposes_and_what_the_winner_used(run_dir):
    """With invariants.timing.startup_allowance_s = 40 the Verification section says what a trial could hide per step
    (40 s over the contract's warm-up + measured steps) and how much extra start-up the promoted candidate used: its
    time outside its steps minus its pair's baseline's (here each candidate run took 30 s longer); at 0, nothing."""
    from infrarsi.report.audit import best_promoted

    data = load_run(run_dir)
    best = best_promoted(data)
    assert best is not None and best.trials
    cand_ids = {b for _, b in best.trials}
    steps = 6
    clocked = [t.model_copy(update={"metrics": t.metrics.model_copy(update={"steps_run": steps}),
                                    "cost": t.cost.model_copy(update={
                                        "wall_s": steps * t.metrics.step_time_s + (40.0 if t.id in cand_ids else 10.0)})})
               if t.role == "verify" and t.status.value == "ok" else t for t in data.trials]
    timing = data.contract.invariants.timing.model_copy(update={"startup_allowance_s": 40.0})
    loose = data.contract.model_copy(update={"invariants": data.contract.invariants.model_copy(update={"timing": timing})})
    md = to_markdown(build(dataclasses.replace(data, trials=clocked, contract=loose), sections=["verification"]))
    n = timing.warmup_steps + timing.measured_steps
    assert (f"so a trial could hide up to 40 s / {n} steps = {40 / n * 1000:.1f} ms per step of computation in its "
            f"start-up.") in md, md
    assert f"The promoted candidate used 30.0 s of it (its time outside its steps minus its pair's baseline's, median " \
           f"of {len(best.trials)} pairs, 30.0 s)." in md, md
    assert "Start-up allowance" not in to_markdown(build(dataclasses.replace(data, trials=clocked),
                                                         sections=["verification"]))


def test_the_mfu_formula_is_in_the_words_of_the_framework_whose_spec_builds_its_convention():
    """The report's one formula is transformer.CAUSAL_MATMULS; whose accounting it is comes from the spec that builds
    that value with its own words (Megatron's), not from the report."""
    from infrarsi.adapters.registry import spec
    from infrarsi.report.mfu import formula
    from infrarsi.transformer import CAUSAL_MATMULS

    conv = spec("megatron").flops_convention
    assert conv == CAUSAL_MATMULS and conv.text == "Megatron-style: " + CAUSAL_MATMULS.text
    assert formula() == ("FLOPs/step = 6·N·T + 6·L·S²·h·B (Megatron-style: 6 FLOPs per matmul parameter per token, "
                         "forward and backward; causal attention 12·L·S²·h·B halved); N = matmul parameters without "
                         "the embedding, T = B·S tokens per step; MFU = FLOPs/step / (step time × devices × peak "
                         "FLOP/s per device)")
