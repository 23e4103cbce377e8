"""The objectives of ``bench_search.py``: a landscape (a reference workload or a perturbed variant of it), how its knobs
are named to the tuners, and how much memory its devices have.

Arms that cannot flatter the search (``--names``, ``--oom-heavy`` of ``bench_search.py``):

- ``names="opaque"``: every knob is renamed to an opaque token (``k0``..), every categorical value too (``v0``..), in
  an order drawn from the run's seed (knob order and value order shuffled), and each rule's message says only that it
  is broken. What a knob means reaches the tuner only through trials. Int values stay numbers, bools stay bools
  (a user's space has those too), and each knob keeps its default.
- ``names="short"``: the spellings a library user writes (``tp``, ``pp``, ``mbs``, ``recompute``, ``seq_par``...),
  values unchanged.
- ``oom_heavy=True``: the same cluster with a device capacity at which a drawn share, U(0.70, 0.85) per variant, of a
  uniform sample of valid settings runs out of memory (the capacity is the matching quantile of their device peaks).
  The physics is the variant's; only the memory is less. Nothing here reads what a prior or a memory model knows.

The landscape itself always runs on the catalog's names; a renamed setting is translated back before it is simulated.

    land = Landscape("moe16b-h100x32", 3, names="opaque", oom_heavy=True, rename_seed=7)
    land.space                 # what the tuner sees
    land.simulate(s, seed, cv) # s in the tuner's names
    land.optimum()             # noise-free fastest valid step time (exhaustive, cached)
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infrarsi.knobs import Constraint, Knob, KnobSpace, Setting
from infrarsi.search import Outcome
from infrarsi.trial.memory_estimate import MemoryEstimate
from infrarsi.workloads.simulated import exhaustive_optimum, get_workload, simulate, space_for
from infrarsi.workloads.variants import Variant

NOISE_CV = 0.02
CACHE = Path(__file__).resolve().parents[1] / ".infrarsi" / "bench"
OOM_HEAVY = (0.70, 0.85)  # the share of valid settings that run out of memory on an OOM-heavy landscape
SAMPLE = 4000  # valid settings drawn to set an OOM-heavy capacity (and by --describe)
# How a library user spells the catalog's knobs (names="short"): what the README's example and the users write.
SHORT = {"tensor_parallel": "tp", "pipeline_parallel": "pp", "context_parallel": "cp", "data_parallel": "dp",
         "virtual_pipeline": "vpp", "expert_parallel": "ep", "micro_batch_size": "mbs", "sequence_parallel": "seq_par",
         "recompute_granularity": "recompute", "distributed_optimizer": "dist_opt", "bf16": "bf16",
         "fp8_recipe": "fp8", "moe_token_dispatcher": "dispatcher", "tp_comm_overlap": "tp_overlap",
         "overlap_grad_reduce": "overlap_grad", "overlap_param_gather": "overlap_param", "moe_grouped_gemm": "grouped_gemm"}
NAMES = ("catalog", "short", "opaque")


def _cached(file: str, key: str, compute: Any) -> Any:
    """``compute()``, kept in ``.infrarsi/bench/<file>`` under ``key`` (written atomically: several processes share it)."""
    path = CACHE / file
    known = json.loads(path.read_text()) if path.exists() else {}
    if key not in known:
        value = compute()
        known = json.loads(path.read_text()) if path.exists() else {}
        known[key] = value
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        tmp.replace(path)
    return known[key]


class Renaming:
    """A space with its knobs (and categorical values) renamed, and the translation both ways."""

    def __init__(self, space: KnobSpace, names: str, seed: int) -> None:
        rng = random.Random(f"rename:{seed}")
        knobs = list(space.knobs)
        if names == "opaque":
            rng.shuffle(knobs)
            tokens = [f"k{i}" for i in range(len(knobs))]
        else:
            tokens = [SHORT.get(k.name, k.name) for k in knobs]
        self.to_new: dict[str, str] = {k.name: t for k, t in zip(knobs, tokens)}
        self.to_old: dict[str, str] = {t: n for n, t in self.to_new.items()}
        self.values: dict[str, dict[Any, Any]] = {}  # old knob name -> {old value: new value}
        new_knobs = []
        for k in knobs:
            vmap = {v: v for v in k.domain}
            if names == "opaque" and k.kind == "categorical":
                order = list(range(len(k.domain)))
                rng.shuffle(order)
                vmap = {v: f"v{order[i]}" for i, v in enumerate(k.domain)}
            self.values[k.name] = vmap
            dom = sorted(vmap.values(), key=str) if names == "opaque" and k.kind == "categorical" else list(vmap.values())
            new_knobs.append(Knob(name=self.to_new[k.name], kind=k.kind, domain=dom, default=vmap[k.default],
                                  **({} if names == "opaque" else {"group": k.group, "doc": k.doc})))
        self.back: dict[str, dict[Any, Any]] = {self.to_new[n]: {b: a for a, b in m.items()} for n, m in self.values.items()}
        opaque = names == "opaque"
        cons = [Constraint(f"rule{i}" if opaque else c.name, _translated(c, self, opaque))
                for i, c in enumerate(space.constraints)]
        self.space = KnobSpace(new_knobs, cons)

    def named(self, s: Any) -> Setting:
        """A setting in the tuner's names, in the catalog's."""
        return Setting({self.to_old[k]: self.back[k][v] for k, v in s.items()})

    def renamed(self, s: Any) -> Setting:
        """A setting in the catalog's names, in the tuner's."""
        return Setting({self.to_new[k]: self.values[k][v] for k, v in s.items()})


class _Named(Mapping):
    """A renamed setting seen in the catalog's names, translated as each knob is read (a rule reads a few)."""

    __slots__ = ("s", "ren")

    def __init__(self, s: Mapping, ren: Renaming) -> None:
        self.s, self.ren = s, ren

    def __getitem__(self, old: str) -> Any:
        new = self.ren.to_new[old]
        v = self.s[new]
        return self.ren.back[new].get(v, v)

    def __iter__(self):
        return (self.ren.to_old[k] for k in self.s if k in self.ren.to_old)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, old: object) -> bool:
        return old in self.ren.to_new and self.ren.to_new[old] in self.s


def _translated(c: Constraint, ren: Renaming, opaque: bool):
    def check(s: Any) -> str | None:
        msg = c(_Named(s, ren))
        return ("a rule is broken" if opaque else msg) if msg else None

    return check


class Landscape:
    """One objective: a reference workload or a perturbed variant, with its exhaustive optimum; see the module
    docstring for ``names``, ``oom_heavy`` and ``rename_seed``."""

    def __init__(self, base: str, variant: int | None, *, names: str = "catalog", oom_heavy: bool = False,
                 rename_seed: int = 0) -> None:
        if names not in NAMES:
            raise ValueError(f"names={names!r}: choose one of {', '.join(NAMES)}")
        if oom_heavy and variant is None:
            raise SystemExit("--oom-heavy: needs perturbed variants (--suite family)")
        self.base, self.variant, self.names, self.oom_heavy = base, variant, names, oom_heavy
        self.v = Variant(base, variant) if variant is not None else None
        if oom_heavy:
            self.target_oom_share = random.Random(f"oom-heavy:{base}:{variant}").uniform(*OOM_HEAVY)
            cap = _cached("capacities.json", f"{self.v.name}@{self.target_oom_share:.4f}", self._oom_heavy_capacity)
            self.v = Variant(base, variant, memory_bytes=cap)
        self.name = self.v.name if self.v else base
        self.w = get_workload(base)
        self.named_space: KnobSpace = space_for(base)
        self.capacity = float(self.v.capacity if self.v else self.w.spec.memory_bytes)
        self.ren = Renaming(self.named_space, names, rename_seed) if names != "catalog" else None
        self.space: KnobSpace = self.ren.space if self.ren else self.named_space
        self.baseline = self.to_tuner(self.named_space.complete(self.w.baseline))
        self._opt: dict[str, float] | None = None

    def _oom_heavy_capacity(self) -> float:
        """The device capacity at which ``target_oom_share`` of a uniform sample of valid settings runs out of memory."""
        used = sorted(self.v.device_used(s) for s in space_for(self.base).candidates(SAMPLE, random.Random(99)))
        return float(used[min(len(used) - 1, int(round((1.0 - self.target_oom_share) * len(used))))])

    # translations (identity on the catalog's names)
    def to_named(self, s: Any) -> Setting:
        return self.ren.named(s) if self.ren else Setting(s)

    def to_tuner(self, s: Any) -> Setting:
        return self.ren.renamed(s) if self.ren else Setting(s)

    def translate_prior(self, p: Any) -> Any:
        """A Prior on a catalog knob value, stated in the tuner's names."""
        if self.ren is None:
            return p
        return p.model_copy(update={"knob": self.ren.to_new[p.knob], "value": self.ren.values[p.knob].get(p.value, p.value)})

    def translate_estimate(self, est: Any) -> Any:
        """A memory estimate of catalog settings, as a function of the tuner's (its error attributes kept)."""
        est = MemoryEstimate.of(est)
        return MemoryEstimate(peak=lambda s: est(self.to_named(s)), residual_sd=est.residual_sd,
                              interaction_sd=est.interaction_sd)

    def simulate(self, s: Setting, seed: int | None, noise_cv: float):
        n = self.to_named(s)
        if self.v:
            return self.v.simulate(n, seed=seed, noise_cv=noise_cv)
        return simulate(self.base, n, seed=seed, noise_cv=noise_cv)

    def step_time(self, s: Setting) -> float:
        """Noise-free step seconds whether or not ``s`` fits (a variant only)."""
        return self.v.step_time(self.to_named(s))

    def formula_time(self, s: Setting, *, drawn: bool = True) -> float:
        return self.v.formula_time(self.to_named(s), drawn=drawn)

    def _optimum(self) -> dict[str, float]:
        """Exhaustive optimum step time and the share of valid settings that OOM, cached in ``.infrarsi/bench``."""
        def compute() -> dict[str, float]:
            o = self.v.optimum() if self.v else exhaustive_optimum(self.base)
            return {"step_time_s": o.step_time_s, "oom_share": o.n_oom / max(1, o.n_valid)}

        if self._opt is None:
            self._opt = _cached("optima2.json", self.name, compute)
        return self._opt

    def optimum(self) -> float:
        return float(self._optimum()["step_time_s"])

    def oom_share(self) -> float:
        """The share of the valid settings that run out of memory (exhaustive)."""
        return float(self._optimum()["oom_share"])


class Bench:
    """A landscape, a noise seed and a reporting mode: the objective every tuner calls."""

    noise_cv = NOISE_CV  # run-to-run CV of every trial's step time

    def __init__(self, land: Landscape, seed: int, report: str) -> None:
        self.land, self.seed, self.report = land, seed, report
        self.space, self.capacity, self.baseline = land.space, land.capacity, land.baseline
        self._true: dict[Setting, float | None] = {}
        self._pool: list[Setting] | None = None
        self.notes: dict[str, Any] = {}  # tuner-specific figures for the JSON (e.g. wrong priors flagged)
        self.verify_at: set[int] = set()  # budgets at which a tuner with its own ranking records its top candidates
        self.tops: dict[int, list[Setting]] = {}  # budget -> that ranking's VERIFY_TOP best (this search: Tuner.top)

    def __call__(self, s: Setting) -> Outcome:
        r = self.land.simulate(s, self.seed, NOISE_CV)
        self._true[s] = r.noise_free_step_time_s
        if r.oom:
            return Outcome("oom")
        peak = r.peak_memory_bytes if self.report == "peaks" else None
        return Outcome("ok", step_time_s=r.step_time_s, peak_memory_bytes=peak)

    def remeasure(self, s: Setting, repeat: int) -> float:
        """A rerun of a setting that ran: its step time with fresh noise (repeat 0, 1, ...: independent draws, none of
        them the search's own measurement)."""
        return self.land.simulate(s, 1_000_000 * (repeat + 1) + self.seed, NOISE_CV).step_time_s

    def true_time(self, s: Setting) -> float | None:
        if s not in self._true:
            self._true[s] = self.land.simulate(s, None, 0.0).noise_free_step_time_s
        return self._true[s]

    def project(self, s: dict[str, Any], taken: set[Setting], rng: random.Random) -> Setting | None:
        """The nearest valid untried setting (fewest knobs changed) of a shared pool; ties at random."""
        if self._pool is None:
            self._pool = self.space.candidates(4000, random.Random(self.seed))
        best_d, best = math.inf, []
        for c in self._pool:
            if c in taken:
                continue
            d = sum(c[k] != v for k, v in s.items())
            if d < best_d:
                best_d, best = d, [c]
            elif d == best_d:
                best.append(c)
        return rng.choice(best) if best else None
