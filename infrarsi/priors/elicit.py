"""priors_for: one Prior per non-default knob value, from the LLM where it answers well, else offline.

The LLM is asked for log-scale effects (time, memory; mean and sd) of each non-default value in a
strict schema. Its answer must name only knobs of the space and values of their domains (never the
default): anything else is a schema violation, fed back once, then the whole stage falls back to
the offline knowledge base with a warning. Values the LLM leaves out get the knowledge base's prior.

Sanity check against the knowledge base (``check_against_offline=True``), separately for time and
memory, where the knowledge base is informed (source "offline"):

* conflict = ``|llm - kb| > 3 sqrt(sd_llm^2 + sd_kb^2)``, or opposite signs where both are confident
  (``|mean| > 2 sd`` on each side);
* a conflicting belief keeps the LLM's mean -- it may know this workload better -- but its sd is widened
  to ``|llm - kb|`` so the knowledge base's value lies within one sd, the rationale starts with
  ``[widened: ...]`` and a warning names the knob. The Bayesian models then let the trials decide
  quickly instead of trusting a confident contradiction of published arithmetic.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..knobs import KnobSpace
from . import llm as llm_mod
from .llm import LLMConfig
from .offline import context, offline_prior
from ..trial.prior import Prior

log = logging.getLogger("infrarsi.priors")


class PriorItem(BaseModel):
    """One belief as the LLM states it (strict-schema friendly: no Any, every field required)."""

    model_config = ConfigDict(extra="forbid")

    knob: str
    value: str = Field(description="the non-default value exactly as listed")
    time_mean: float = Field(ge=-3, le=3, description="effect on ln(step time) vs the default; -0.1 = ~10% faster")
    time_sd: float = Field(gt=0, le=3, description="uncertainty of time_mean, same scale")
    mem_mean: float = Field(ge=-3, le=3, description="effect on ln(peak memory per device) vs the default")
    mem_sd: float = Field(gt=0, le=3)
    rationale: str = Field(description="one sentence: the mechanism or published fact")


class PriorAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    priors: list[PriorItem]


def system_prompt(framework: str = "") -> str:
    """The system message. ``framework``: how prose names the workload's framework (its spec's ``title``, which the
    caller reads from the Workload), named beside PyTorch; "": PyTorch alone."""
    return (
        f"You are a performance engineer for distributed LLM training ({framework + ', ' if framework else ''}PyTorch). "
        "For each listed knob value, estimate its effect relative to the knob's default on the natural log of "
        "steady-state step time and on the natural log of peak memory per device, holding every other knob at its "
        "default. Give a mean and a standard deviation for each; use a wide sd when unsure. Omit values you know "
        "nothing about. Use only the knobs and values listed."
    )


def _prompt(space: KnobSpace, workload: dict[str, Any], hardware: dict[str, Any],
            framework: str = "") -> list[dict[str, Any]]:
    knobs = [
        {"knob": k.name, "kind": k.kind, "group": k.group, "default": k.default,
         "values": [str(v) for v in k.domain if v != k.default], "doc": k.doc}
        for k in space.knobs if len(k.domain) > 1
    ]
    user = (
        f"Workload (fixed): {json.dumps(workload, sort_keys=True, default=str)}\n"
        f"Hardware: {json.dumps(hardware, sort_keys=True, default=str)}\n"
        f"Knobs:\n{json.dumps(knobs, indent=1, default=str)}"
    )
    return [{"role": "system", "content": system_prompt(framework)}, {"role": "user", "content": user}]


def _match(space: KnobSpace, knob: str, value: str) -> tuple[Any, str]:
    """(the domain value, "") or (None, the problem in one line, naming the fix)."""
    if knob not in space:
        return None, f"knob {knob!r} is not in the space; use one of {space.names}"
    k = space[knob]
    allowed = [v for v in k.domain if v != k.default]
    for v in allowed:
        if str(v).lower() == str(value).strip().lower():
            return v, ""
    if str(value).strip().lower() == str(k.default).lower():
        return None, f"{knob}={value} is the default; give effects only for {[str(v) for v in allowed]}"
    return None, f"{knob}={value} is not in its domain; use one of {[str(v) for v in allowed]}"


def _checker(space: KnobSpace):
    def check(ans: PriorAnswer) -> list[str]:
        problems, seen = [], set()
        for i, it in enumerate(ans.priors):
            v, why = _match(space, it.knob, it.value)
            if why:
                problems.append(f"priors[{i}]: {why}")
            elif (it.knob, repr(v)) in seen:
                problems.append(f"priors[{i}]: {it.knob}={it.value} is listed twice; give it once")
            else:
                seen.add((it.knob, repr(v)))
            for f in ("time_mean", "time_sd", "mem_mean", "mem_sd"):
                if not math.isfinite(getattr(it, f)):
                    problems.append(f"priors[{i}].{f}: not a finite number")
        return problems

    return check


def reconcile(llm_prior: Prior, kb: Prior) -> tuple[Prior, list[str]]:
    """The LLM prior after the sanity check against the knowledge base, and what was widened (see module doc)."""
    if kb.source != "offline":
        return llm_prior, []
    upd: dict[str, float] = {}
    notes = []
    for axis in ("time", "mem"):
        m, s = getattr(llm_prior, f"{axis}_mean"), getattr(llm_prior, f"{axis}_sd")
        km, ks = getattr(kb, f"{axis}_mean"), getattr(kb, f"{axis}_sd")
        gap = abs(m - km)
        sign_clash = m * km < 0 and abs(m) > 2 * s and abs(km) > 2 * ks
        if gap > 3 * math.hypot(s, ks) or sign_clash:
            upd[f"{axis}_sd"] = max(s, gap)
            notes.append(f"{axis} {m:+.2f}±{s:.2f} vs offline {km:+.2f}±{ks:.2f}")
    if not upd:
        return llm_prior, []
    why = f"[widened: conflicts with offline KB: {'; '.join(notes)}] {llm_prior.rationale}"
    return llm_prior.model_copy(update={**upd, "rationale": why}), notes


def priors_for(
    space: KnobSpace,
    *,
    workload: dict[str, Any],
    hardware: dict[str, Any],
    llm: LLMConfig | None = None,
    record_dir: Path | None = None,
    check_against_offline: bool = True,
    framework: str = "",
) -> list[Prior]:
    """One Prior per non-default knob value of ``space`` (``space.feature_names`` order).

    ``llm`` None = the environment's endpoint, or offline when none is configured. ``record_dir`` is
    the run directory: exchanges go to ``record_dir/llm/<n>.json``. ``framework``: the workload's framework as
    prose names it (its spec's title), which the LLM is told. Never raises for endpoint trouble.
    """
    ctx = context(space, workload, hardware)
    kb = {(k.name, repr(v)): offline_prior(k, v, ctx) for k in space.knobs for v in k.domain if v != k.default}
    got: dict[tuple[str, str], Prior] = {}
    cfg = llm_mod.resolve(llm)
    if cfg is not None and kb:
        ans = llm_mod.ask(cfg, stage="priors", messages=_prompt(space, workload, hardware, framework), schema=PriorAnswer,
                          check=_checker(space), record_dir=record_dir)
        if not ans.ok:
            log.warning("LLM priors unusable (%s); using the offline knowledge base for all %d values", ans.error, len(kb))
        else:
            for it in ans.value.priors:
                v, _ = _match(space, it.knob, it.value)
                p = Prior(knob=it.knob, value=v, time_mean=it.time_mean, time_sd=it.time_sd, mem_mean=it.mem_mean,
                          mem_sd=it.mem_sd, source="llm", rationale=it.rationale)
                if check_against_offline:
                    p, notes = reconcile(p, kb[(it.knob, repr(v))])
                    if notes:
                        log.warning("LLM prior %s=%s conflicts with the offline KB (%s); sd widened",
                                    it.knob, v, "; ".join(notes))
                got[(it.knob, repr(v))] = p
    return [got.get(key, prior) for key, prior in kb.items()]
