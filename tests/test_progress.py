"""The live line (infrarsi/progress.py): on a terminal a status line; without one, plain lines, no control codes."""

import io
import time

from rich.console import Console

from infrarsi.progress import Heartbeat, clock, eta


def test_without_a_terminal_the_line_is_plain_text_every_period():
    buf = io.StringIO()
    con = Console(file=buf, force_terminal=False, width=200)
    with Heartbeat(con, "run: trial 3 of 14", plain_every_s=0.2, tick_s=0.05, announce=True) as beat:
        time.sleep(0.5)
        beat.note("run: trial 4 of 14", eta="ETA ~1:00")
        time.sleep(0.5)
    text = buf.getvalue()
    assert "\x1b" not in text and "\r" not in text  # a log file gets no control codes
    assert text.startswith("run: trial 3 of 14 ...\n")
    assert "... run: trial 3 of 14: running 0:00; elapsed 0:00" in text
    assert "... run: trial 4 of 14: running 0:00; elapsed 0:00; ETA ~1:00" in text


def test_on_a_terminal_it_draws_one_status_line():
    buf = io.StringIO()
    con = Console(file=buf, force_terminal=True, width=120)
    with Heartbeat(con, "verify: candidate 1 of 2, pair 1 of 4", tick_s=0.05):
        time.sleep(0.3)
    assert "verify: candidate 1 of 2, pair 1 of 4: running 0:00" in buf.getvalue()


def test_clock_and_eta():
    assert clock(42) == "0:42" and clock(190) == "3:10" and clock(3725) == "1:02:05"
    assert eta(0, 10, 100.0) == "" and eta(2, 10, 60.0) == "ETA ~4:00" and eta(1, 100, 3600.0).endswith(" h")


def test_verification_has_an_eta_at_most_the_pairs_left():
    """Verification's live line gets an ETA from the pace per pair over the most pairs left (the rule may decide at
    any look, so 'at most'); none before a pair has finished."""
    from infrarsi.progress import eta_at_most
    from infrarsi.stages.run import _pair_eta

    assert eta_at_most(0, 10, 5.0) == "" and eta_at_most(2, 6, 60.0) == "ETA at most ~3:00"
    beat = Heartbeat(Console(file=io.StringIO()), "verify: A/B pairs against the baseline")
    note = _pair_eta(beat)
    note("verify: candidate 1 of 2, pair 1 (at most 12)", 24)
    assert beat.eta == ""
    time.sleep(0.05)
    note("verify: candidate 1 of 2, pair 2 (at most 12)", 23)
    assert beat.subject.endswith("pair 2 (at most 12)") and beat.eta.startswith("ETA at most ~0:0")
