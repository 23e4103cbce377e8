"""The report as a team lead reads it: what won, by how much, how sure, what it cost, what was tried, in words;
a success in green; whole sentences; the best-so-far line follows what was reproduced."""

import dataclasses

from infrarsi.trial import Metrics, Trial
from infrarsi.report.plots import best_so_far


def test_the_summary_says_it_in_words_and_a_success_is_green(reported_run):
    run_dir, _ = reported_run
    md = (run_dir / "report.md").read_text()
    page = (run_dir / "report.html").read_text()
    summary = md.split("## Summary", 1)[1].split("## ", 1)[0]
    assert "**Result:**" in summary and "as fast as the baseline" in summary and "95% confidence or more" in summary
    assert "noise floor" in summary and "What was tried:" in summary and "What it cost:" in summary
    assert "device-hours" in summary and "lower bound above 1 + mde" not in summary
    assert "<strong class='good'>Result:</strong>" in page and "strong.good{color:#17702a}" in page
    assert "<strong class='bad'>Result" not in page


def test_a_rationale_is_never_cut(reported_run):
    from infrarsi.report import load_run
    from infrarsi.report.render import build, to_html, to_markdown

    run_dir, _ = reported_run
    data = load_run(run_dir)
    long = ("TP 4 to 8: weights, gradients, optimizer state and most activations split in two (Korthikanti et al. "
            "2022); each doubling adds 4 all-reduces per layer")
    models = data.search.models
    revs = list(models.time_revisions)
    revs[0] = revs[0].model_copy(update={"rationale": long})
    models = models.model_copy(update={"time_revisions": revs})
    data = dataclasses.replace(data, search=data.search.model_copy(update={"models": models}))
    blocks = build(data, sections=["priors"])
    assert long in to_markdown(blocks) and long in to_html(blocks)  # whole (it was cut at 80 characters)


def _t(i, role, s):
    return Trial(id=i, setting={}, status="ok", role=role, metrics=Metrics(step_time_s=s))


def test_the_best_so_far_line_ignores_a_single_fast_rerun():
    trials = [_t(0, "doctor", 20.0), _t(1, "search", 15.0), _t(2, "search", 14.0), _t(3, "verify", 20.1),
              _t(4, "verify", 12.0)]  # trial 4: one lucky re-run, not a result
    assert best_so_far(trials) == ([0, 1, 2], [20.0, 15.0, 14.0])
