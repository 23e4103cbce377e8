"""The report's figures, each a PNG (bytes) drawn with matplotlib's Agg backend (no display needed).

Every point is a trial on disk; labels carry trial ids where there is room. Times in seconds, memory in
MiB, effects as percent change relative to the knob's default (100 * (exp(x) - 1)).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.patches  # noqa: E402
import matplotlib.ticker  # noqa: E402

from ..trial import WARMUP_ROLE, Trial  # noqa: E402
from ..rundir.models import EffectRecord, RevisionRecord  # noqa: E402
from ..verify.speedup import CI_NAME  # noqa: E402
from ..trial.status import TrialStatus  # noqa: E402
from .fit import Fit  # noqa: E402

MiB = 2**20
STATUS_STYLE = {  # status -> (color, marker); a TrialStatus key also answers to its string ("oom")
    TrialStatus.OK: ("tab:blue", "o"), TrialStatus.OOM: ("tab:red", "X"), TrialStatus.CRASH: ("tab:purple", "s"),
    TrialStatus.TIMEOUT: ("tab:orange", "v"), TrialStatus.NUMERICS_DRIFT: ("tab:brown", "D"),
    TrialStatus.INVALID: ("tab:gray", "P"), TrialStatus.CONTRACT_VIOLATION: ("black", "*"),
    TrialStatus.CANCELLED: ("tab:olive", "h"), TrialStatus.RUNNING: ("tab:cyan", "."),
    TrialStatus.PRUNED: ("tab:pink", ">"), TrialStatus.SKIPPED: ("lightgray", "<"),
}


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", pad_inches=0.15)  # long labels are never cut
    plt.close(fig)
    return buf.getvalue()


def pct(x: float) -> float:
    return 100.0 * math.expm1(x)


ROLE_STYLE = {"doctor": ("tab:gray", "baseline (doctor, again)"), "search": ("tab:blue", "search"),
              "verify": ("tab:orange", "verification re-run")}  # the three stages, told apart at a glance


def best_so_far(trials: Sequence[Trial]) -> tuple[list[int], list[float]]:
    """(trial ids, the fastest step time a baseline or search trial had reached by then). Verification re-runs are
    left out: one fast re-run is not a result (the verified median is drawn on its own)."""
    best, xs, ys = math.inf, [], []
    for t in trials:
        if t.role.startswith("verify"):
            continue
        if t.status is TrialStatus.OK and t.role in ("doctor", "search"):
            best = min(best, t.metrics.step_time_s)
        if math.isfinite(best):
            xs.append(t.id)
            ys.append(best)
    return xs, ys


def progress(trials: Sequence[Trial], verified: tuple[float, Sequence[int]] | None = None) -> bytes:
    """Top: step time of every ok trial but the warm-up (its figures are not data), coloured by stage; the best a *search* trial found so far (a single fast
    re-run of verification is not a result); ``verified``: (the promoted candidate's median step time, its verify
    trial ids), drawn as the verified result. Bottom: a strip of every trial's status, one cell per trial."""
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 5.0), sharex=True, gridspec_kw={"height_ratios": [4, 0.7]})
    ok = [t for t in trials if t.status is TrialStatus.OK and t.role != WARMUP_ROLE]  # a warm-up's figures are not data
    top = max((t.metrics.step_time_s for t in ok), default=1.0) * 1.15
    xs, ys = best_so_far(trials)
    if xs:
        ax.step(xs, ys, where="post", color="tab:green", lw=2, label="best found by the search")
    if verified is not None:
        v_s, ids = verified
        ax.hlines(v_s, min(ids) - 0.5, max(ids) + 0.5, color="tab:green", lw=3, ls="--",
                  label=f"verified: {v_s:.3g} s (median of its re-runs)")
    for role, (color, label) in ROLE_STYLE.items():
        sel = [t for t in ok if t.role.startswith(role) or (role == "doctor" and t.role == "rebaseline")]
        if sel:
            ax.scatter([t.id for t in sel], [t.metrics.step_time_s for t in sel], s=24, color=color, label=label,
                       alpha=0.85, zorder=3)
    for st, (color, marker) in STATUS_STYLE.items():
        sel = [t for t in trials if t.status is st and st is not TrialStatus.OK]
        if sel:
            ax.scatter([t.id for t in sel], [top] * len(sel), marker=marker, color=color, s=60, label=st.value.upper(),
                       clip_on=False)
    ax.set_ylabel("step time (s)")
    ax.set_title("Step time by trial (failed trials on the top edge)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: the points stay visible
    counts: dict[TrialStatus, int] = {}
    strip = {**STATUS_STYLE, TrialStatus.OK: ("tab:green", "o")}  # the strip: ok green, failures their colour
    for t in trials:  # one coloured cell per trial
        color, _ = strip.get(t.status, ("black", "o"))
        ax2.bar(t.id, 1, width=1.0, color=color, edgecolor="white", linewidth=0.5)
        counts[t.status] = counts.get(t.status, 0) + 1
    ax2.set_yticks([])
    ax2.set_ylabel("status", fontsize=8)
    ax2.legend(handles=[matplotlib.patches.Patch(color=strip.get(st, ("black", "o"))[0], label=f"{st.value} {n}")
                        for st, n in counts.items()], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.2))
    ax2.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax2.set_xlabel("trial id")
    return _png(fig)


def predicted_vs_observed(fit: Fit) -> bytes:
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9, 4))
    if fit.time:
        obs = [r.observed_s for r in fit.time]
        ax.errorbar(obs, [r.mean_s for r in fit.time],
                    yerr=[[r.mean_s - r.lo_s for r in fit.time], [r.hi_s - r.mean_s for r in fit.time]],
                    fmt="o", ms=4, color="tab:blue", alpha=0.7, label="tuner's fit, 90% predictive")
        prop = [(r.observed_s, r.proposed_s) for r in fit.time if r.proposed_s]
        if prop:
            ax.scatter(*zip(*prop), marker="^", color="tab:orange", s=30, label="predicted before the trial")
        lo, hi = min(obs) * 0.8, max(obs) * 1.25
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
    ax.set_xlabel("observed step time (s)")
    ax.set_ylabel("predicted step time (s)")
    ax.set_title("Time model")
    cap = fit.capacity_bytes / MiB
    ok = [r for r in fit.memory if r.status is TrialStatus.OK]
    oom = [r for r in fit.memory if r.status is TrialStatus.OOM]
    if ok:
        ax2.errorbar([r.observed_bytes / MiB for r in ok], [r.mean_bytes / MiB for r in ok],
                     yerr=[[(r.mean_bytes - r.lo_bytes) / MiB for r in ok], [(r.hi_bytes - r.mean_bytes) / MiB for r in ok]],
                     fmt="o", ms=4, color="tab:blue", alpha=0.7, label="ok: observed peak")
    if oom:  # censored: the peak is somewhere above capacity, drawn at capacity with an arrow
        ax2.scatter([cap] * len(oom), [r.mean_bytes / MiB for r in oom], marker="X", color="tab:red", s=60,
                    label="OOM (peak > capacity)")
        for r in oom:
            ax2.annotate("", xy=(cap * 1.12, r.mean_bytes / MiB), xytext=(cap, r.mean_bytes / MiB),
                         arrowprops={"arrowstyle": "->", "color": "tab:red"})
    vals = [r.mean_bytes / MiB for r in fit.memory] + [cap] + [r.observed_bytes / MiB for r in ok]
    if vals:
        lo, hi = min(vals) * 0.8, max(vals) * 1.25
        ax2.plot([lo, hi], [lo, hi], "k--", lw=1)
        ax2.axvline(cap, color="tab:red", lw=1, ls=":")
        ax2.axhline(cap, color="tab:red", lw=1, ls=":", label=f"capacity {cap:.0f} MiB")
    ax2.set_xlabel("observed peak memory (MiB)")
    ax2.set_ylabel("predicted peak memory (MiB)")
    ax2.set_title("Memory model (OOMs censored)")
    ax2.legend(fontsize=7)
    return _png(fig)


def memory_boundary(fit: Fit) -> bytes:
    """Trials sorted by predicted peak: predicted interval, observed peak or OOM, capacity line, P(OOM)."""
    rows = sorted(fit.memory, key=lambda r: r.mean_bytes)
    fig, ax = plt.subplots(figsize=(8, 4))
    x = list(range(len(rows)))
    cap = fit.capacity_bytes / MiB
    ax.fill_between(x, [r.lo_bytes / MiB for r in rows], [r.hi_bytes / MiB for r in rows], color="tab:blue",
                    alpha=0.15, label="predicted peak, 90%")
    ax.plot(x, [r.mean_bytes / MiB for r in rows], color="tab:blue", lw=1)
    n_oom = 0
    for i, r in enumerate(rows):
        if r.status is TrialStatus.OK:
            ax.scatter([i], [r.observed_bytes / MiB], color="tab:blue", s=25)
        else:  # censored: drawn at capacity; labels alternate up and down so neighbours stay readable
            ax.scatter([i], [cap], marker="X", color="tab:red", s=70)
            ax.annotate(f"OOM #{r.trial}", (i, cap), textcoords="offset points", xytext=(-14, 9 if n_oom % 2 == 0 else -16),
                        fontsize=7, color="tab:red")
            n_oom += 1
    ax.axhline(cap, color="tab:red", ls="--", label=f"capacity {cap:.0f} MiB")
    ax.set_xticks(x, [str(r.trial) for r in rows], fontsize=7)
    ax.set_xlabel("trial id (sorted by predicted peak)")
    ax.set_ylabel("peak memory (MiB)")
    ax2 = ax.twinx()
    ax2.plot(x, [r.p_oom for r in rows], color="tab:red", alpha=0.6, lw=1, marker=".", label="P(OOM)")
    ax2.set_ylim(-0.02, 1.02)
    ax2.set_ylabel("P(OOM)")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title("Memory boundary against capacity")
    return _png(fig)


def _label(feature: str) -> str:
    """``kernel_rmsnorm=kernels/rmsnorm/triton_rows.py@rows4`` -> ``kernel_rmsnorm=triton_rows.py@rows4``."""
    k, _, v = feature.partition("=")
    return f"{k}={v.rsplit('/', 1)[-1]}" if "/" in v else feature


def effects(time_effects: Sequence[EffectRecord], memory_effects: Sequence[EffectRecord]) -> bytes:
    """Forest plots of the main effects' posteriors: the multiplier exp(effect) with its 90% interval,
    on a log axis (x0.5 and x2 equally far from x1)."""
    panels = [(n, [e for e in es if "*" not in e.feature]) for n, es in (("time", time_effects), ("memory", memory_effects))]
    height = max(2.5, 0.28 * max(len(es) for _, es in panels) + 1.2)
    fig, axes = plt.subplots(1, 2, figsize=(11, height))
    for ax, (name, es) in zip(axes, panels):
        for i, e in enumerate(es):
            color = "tab:green" if e.hi < 0 else ("tab:red" if e.lo > 0 else "tab:gray")
            ax.plot([math.exp(e.lo), math.exp(e.hi)], [i, i], color=color, lw=2)
            ax.scatter([math.exp(e.mean)], [i], color=color, s=20, zorder=3)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ticks = [0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0]
        lo, hi = ax.get_xlim()
        ax.set_xticks([t for t in ticks if lo <= t <= hi], [f"x{t:g}" for t in ticks if lo <= t <= hi])
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_yticks(range(len(es)), [_label(e.feature) for e in es], fontsize=7)
        ax.set_xlabel(f"x {'step time' if name == 'time' else 'peak memory'} (log scale; 1 = no effect)")
        ax.set_title(f"{name}: posterior mean, 90% interval", fontsize=10)
    return _png(fig)


def priors_vs_posteriors(revisions: Sequence[RevisionRecord]) -> bytes:
    """Each prior (grey) above its posterior (blue; red when the prior was miscalibrated)."""
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.42 * len(revisions) + 1.2)))
    for i, r in enumerate(revisions):
        ax.plot([pct(r.prior_lo), pct(r.prior_hi)], [i + 0.15] * 2, color="tab:gray", lw=4, alpha=0.6)
        color = "tab:red" if r.miscalibrated else "tab:blue"
        ax.plot([pct(r.post_lo), pct(r.post_hi)], [i - 0.15] * 2, color=color, lw=2)
        ax.scatter([pct(r.post_mean)], [i - 0.15], color=color, s=18, zorder=3)
    ax.axvline(0, color="k", lw=0.8)
    labels = [f"{_label(r.feature)} ({r.target}, {r.source})" + ("  MISCALIBRATED" if r.miscalibrated else "")
              for r in revisions]
    ax.set_yticks(range(len(revisions)), labels, fontsize=7)
    for tick, r in zip(ax.get_yticklabels(), revisions):
        if r.miscalibrated:
            tick.set_color("tab:red")
    ax.set_xlabel("effect (%): prior 90% (grey) vs posterior 90%")
    ax.set_title("Priors vs posteriors")
    return _png(fig)


def verification(candidates: Sequence[Any], mde: float) -> bytes:
    """``candidates``: the verification record's (trial.verified.VerifiedCandidate)."""
    fig, ax = plt.subplots(figsize=(8, max(2.2, 0.6 * len(candidates) + 1.2)))
    for i, c in enumerate(candidates):
        if c.speedup is None or not c.ci95:
            continue
        color = "tab:green" if c.promoted else "tab:gray"
        lo, hi = c.ci95
        ax.plot([lo, hi], [i, i], color=color, lw=3)
        ax.scatter([c.speedup], [i], color=color, s=40, zorder=3)
        pairs = [a / b for a, b in zip(c.baseline_s or [], c.candidate_s or [])]
        ax.scatter(pairs, [i + 0.18] * len(pairs), color="k", s=8, alpha=0.6)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.axvline(1.0 + mde, color="tab:red", ls="--", lw=1, label=f"1 + mde = {1 + mde:.3f}")
    ax.set_yticks(range(len(candidates)), [f"candidate {i + 1}" + (" (promoted)" if c.promoted else "")
                                           for i, c in enumerate(candidates)], fontsize=8)
    ax.set_xlabel(f"speedup over the baseline ({CI_NAME}; dots: individual pairs)")
    ax.legend(fontsize=7)
    ax.set_title("Re-verification, interleaved pairs")
    return _png(fig)


def failure_cost(cost: Mapping[str, float]) -> bytes:
    fig, ax = plt.subplots(figsize=(6.5, 3))
    kinds = list(cost)
    ax.barh(kinds, [cost[k] for k in kinds], color=[STATUS_STYLE.get(k, ("tab:gray", ""))[0] for k in kinds])
    ax.set_xlabel("device-seconds")
    ax.set_title("Device time spent on failed trials, by kind")
    return _png(fig)
