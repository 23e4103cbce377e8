"""TunerConfig: the search's settings (frozen, keyword-only; every default states the measurement behind it).

Which models and steps a Tuner is made of are its parts (``Tuner(time=..., memory=..., steps=...)``, search/parts.py);
the switches that only took a part away (an ablation) are the parts' own arguments, and ``scripts/bench_search.py
--set`` still takes them by their old names."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class TunerConfig:
    n_initial: int = 4
    """Settings in the initial design (including the caller's ``initial`` ones)."""
    n_candidates: int = 4000
    """Size of the sampled candidate pool (the whole valid space when it is smaller)."""
    oom_margin: float = 0.05
    """Safety margin: a setting 'fits' when its peak is predicted below capacity x (1 - margin)."""
    max_p_oom: float = 0.3
    """Pairing kicks in for promising candidates above this P(OOM); proposals above it are a last resort (when every
    candidate is above it, the likeliest to fit is proposed; the steps tighten it when their proposals ran out of
    memory more often than priced, search/steps.Steps.calibrated).
    (0.5 let the search propose far-away settings priced at P(OOM) 0.4-0.5 that mostly did not fit: the
    setting that maximises EI x P(fit) is where the memory model is most likely too optimistic.)"""
    max_p_oom_without_peaks: float = 0.15
    """The same cap while no trial has reported its peak (step-time-only trials): the memory model is then a
    classifier of "fit" / "did not", whose P(OOM) near the boundary is less sure than a fit to measured peaks.
    On the perturbed clusters in step-time-only mode, 0.3 -> 0.15 took the OOM trials at 30 from 8.3 to 6.2
    (random search: 15.5) for 0.812 -> 0.794 of the optimum (BENCHMARKS.md). Only while the additive model prices
    P(OOM): with the structured model (``StructuredPeak``) this cap gave 0.761 of the optimum at 30 and 4.9 OOM
    trials, ``max_p_oom`` (0.3) 0.821 and 3.1."""
    pair_top: int = 12
    """How many of the fastest-predicted non-fitting candidates get paired with memory savers per ask."""
    mde: float = 0.0
    """Minimum detectable effect (fraction): stop when the best EI (log scale) is below log(1 + mde)."""
    local_every: int = 3
    """Every k-th model-guided proposal is the best one-knob move (with repairs) from the incumbent (0: never):
    the global model ranks regions well but the last few percent sit in the incumbent's neighbourhood.
    ``Steps(local_by_evidence=True)`` chooses by each kind's record instead (:meth:`.steps.Steps.local_due`; measured
    and not kept, docs/notes/search.md)."""
    trust_radius: int = 4
    """Acquisition steps choose among candidates within this many knob changes of one of the 5 fastest settings
    measured, when any is left there (0: the whole pool). Far from every trial the time model's ranking is little
    better than chance (after 30 cold trials its rank correlation over the 100 fastest settings that fit is ~0.3),
    and the P(OOM) there is the least sure: such picks were the search's OOM trials and its slowest ones."""
    ei_sd_scale: float = 0.25
    """The time model's predictive sd is multiplied by this in the expected improvement that ranks candidates (< 1:
    exploit what the model predicts fast more, explore where it is unsure less). The stopping rule
    (``should_stop``) reads the unscaled posterior. On the perturbed clusters, cold, with ``trust_radius`` 4 and no
    Thompson steps, the mean fraction of the optimum at 30 trials went from 0.863 to 0.916 (20 variants; held-out
    variants 0.867 to 0.895); each change alone is in BENCHMARKS.md."""
    knob_semantics: bool = True
    """Hold weak time priors on what a few knobs mean (search/semantics.py: recompute and fp32 cost time, overlap flags
    and the grouped MoE GEMM do not, sequence parallel and the distributed optimizer about break even; round sizes, sd
    0.15-0.3) for the values no given prior states. False: such values start at mean 0, sd ``time_sd``. Cold, on the
    perturbed clusters (60 paired runs per set, BENCHMARKS.md): +0.054 / +0.028 of the optimum at 20 / 30 trials on the
    family, +0.079 / +0.029 on the held-out variants (every interval above 0), OOM trials at 30 2.8 -> 2.4 / 2.5."""
    time_sd: float = 1.0
    """Prior sd (log scale) of the time effect of a knob value no prior speaks about (1.0: "up to ~2.7x either way")."""
    time_prior_from_estimate: bool = True
    """Where the run stage has a predicted step time for the contract (a Megatron or torchtitan launch on a GPU the
    step-time model knows: estimate/step_model.py), the time model starts from it (search/estimated.py: its log as
    the prior mean, a residual learned from the trials). False: the time model starts from the priors alone (the ablation,
    BENCHMARKS.md "The search starting from the predicted step time")."""
    memory_sd: float = 1.0
    """The same for memory effects (without an analytical estimate)."""
    prior_conflict_z: float = 3.0
    """A time prior whose 90% interval the trials alone put this many combined sds away (the trials' estimate
    from a model with no priors vs the prior) is set aside: its sd widens to ``time_sd``, so a confident,
    wrong prior cannot pin the search (0: never). The set-aside priors are in ``Tuner.conflicted``."""
    prior_conflict_log_bf: float = 2.3
    """A knob's time priors are also set aside once the trials favour an open prior (sd ``time_sd``) on that knob over
    the stated one by more than this natural-log Bayes factor (2.3 = 10:1; the time model's marginal likelihood with
    every other prior in place, :mod:`.prior_check`; 0: never)."""
    prior_probe: float = 0.2
    """Probe the strongest untested claim: when a confident prior (sd <= ``prior_probe_sd``) says another value of one
    of the incumbent's knobs is at least this much slower (log time) and no trial has run with it, propose the nearest
    fitting setting with that value, once per knob (0: never). A wrong, confident prior is otherwise self-confirming."""
    prior_probe_sd: float = 0.1
