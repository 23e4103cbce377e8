"""Benchmark: pruning (execute/prune.py) on vs off.

``aa``: how often the rule stops a trial as fast as the incumbent (the A/A false-prune rate) and one 1.3x or 2x
slower (its power), on simulated draws at run-to-run CV 1-15% (infrarsi/testing/prune_draws.py: the doctor's CV
estimated from 3 runs, 5% of lines held back by a loaded machine, a look per gap).

``search``: the search on the simulated reference landscapes (bench_landscape.py, this search as a library user
builds it, the baseline first), paired by (landscape, seed): the same noisy measurement of each setting in both arms.
A trial's device cost is ``devices x (start-up + steps x its step time)``; its step lines arrive at the cumulative
sums of its steps (each N(its measured step time, 2%) in log, 5% of lines held back 1-4 steps); an OOM costs its
start-up and one step. The doctor's CV and MDE come from 3 simulated baseline runs. With pruning on, each search
trial is held against the incumbent as the run stage holds it (the fastest told setting, the doctor's CV) and a
pruned one costs its steps so far and is told its lower bound. Scores: the noise-free time of the fastest measured
setting as a fraction of the exhaustive optimum, at equal trials (``--budget``) and at equal device-seconds (what
the arm without pruning spent at ``--budget``; the arm with it runs on until it has spent as much), and the device
seconds each arm spent to first measure the setting the arm without pruning ends on.

``real``: A/A with real trials: the baseline of a run directory the doctor has measured (its contract, its noise),
run ``--trials`` times, each held against the latest baseline run before it (the doctor's median for the first),
as the run stage holds a search trial against a drift-corrected incumbent; prints each trial and the share pruned.

``outrank``: the verify step's skip before pairs (speedup.outranked_before_pairs): how often a second candidate
exactly as fast as a promoted first is left unverified (the A/A: at most ALPHA = 2.5% is the bar), and how often one
0.8x or 0.5x as fast is (the pairs it saves), on simulated draws (infrarsi/testing/prune_draws.py).

    python scripts/bench_prune.py aa --draws 2000
    python scripts/bench_prune.py outrank --draws 2000
    python scripts/bench_prune.py search --seeds 10 --budget 20
    python scripts/bench_prune.py real --run-dir RUN_DIR --trials 8      # RUN_DIR: after `infrarsi doctor`
    python scripts/bench_prune.py cost --run-dir RUN_DIR [RUN_DIR ...]   # where a run's device time went
    python scripts/bench_prune.py startup --run-dir RUN_DIR --repeats 3 --checkout megatron   # after `infrarsi init`
    python scripts/bench_prune.py tail --run-dir RUN_DIR --repeats 2                           # after `infrarsi init`
    python scripts/bench_prune.py warmup --run-dir RUN_DIR --repeats 3                         # after `infrarsi init`

``cost``: a recorded run's device-seconds per phase (the report's Cost table, report/cost.py), each split into
start-up (launch to the first step line, by the harness's clock), steps and the tail (the last step line to the
end), with the load average its trials ran at, and how many trials the harness ended at their last step; then the
start-up's parts: the first step line, one steady step (the median gap between later step lines), and
what is left before step 1 (interpreter, imports, dataset, model build), per phase's median trial; and the
interpreter with ``import torch`` alone, timed here three times (the share no trial can avoid without sharing a
process, which isolation rules out).

``startup``: the harness's bytecode (execute/bytecode.py) off vs on, paired: the run directory's baseline run as
isolated trials, ``--repeats`` pairs back to back (the order alternating), each trial printed with its first step
line by the harness's clock (launch to the first step line), its wall time and the load average. ``--checkout PKG
...``: those installed packages copied, without their bytecode, into a fresh folder per trial put first on the
launch's PYTHONPATH (a team's source checkout of Megatron-LM or torchtitan, as git gives it; sympy, datasets, ...
as an environment installed without bytecode gives them); the "on" arm compiles each copy once before its trial,
and that one-off is printed beside it. ``--timeline``: every output line of each trial with its arrival (where
the ranks' imports end and their init, dataset and model build begin).

``tail``: the end at the last step (execute/tail_stop.py, ``budget.end_at_last_step``) off vs on, paired: the run
directory's baseline as isolated trials, ``--repeats`` pairs back to back (the order alternating), each printed with
its last step line and its end by the harness's clock and the tail between them (what a trial pays after its last
step line: off, its own shutdown; on, the quiet spell and the stop), its status, step time and peak memory (the
figures the record must keep) and the load average; then the median tail of each arm and the saving per trial.

``warmup``: the doctor's warm-up run (execute/tail_stop.py) whole vs ended after its first step line, paired: the run
directory's baseline as isolated trials, ``--repeats`` pairs back to back (the order alternating), "whole" as a
measured baseline run (ended at its last step, as the warm-up was before), "first" with the warm-up's role; each
printed with its first and last step line and its end by the harness's clock, its device-seconds, status and the
load average; then the median device-seconds of each arm: the saving per tune (one warm-up per doctor).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from infrarsi.doctor.noise import mde  # noqa: E402
from infrarsi.execute.prune import Target, judge  # noqa: E402
from infrarsi.search import Outcome, Tuner  # noqa: E402
from infrarsi.trial.status import TrialStatus  # noqa: E402
from infrarsi.testing.prune_draws import outrank_skip_rate, table  # noqa: E402
from infrarsi.workloads.simulated import WORKLOADS  # noqa: E402

from bench_landscape import NOISE_CV, Bench, Landscape  # noqa: E402

STEP_CV, LATE = 0.02, 0.05


def aa(args: argparse.Namespace) -> None:
    print(f"A/A and power of the pruning rule, {args.draws} simulated trials per cell (doctor: 3 runs; incumbent: "
          f"1 run; {LATE:.0%} of lines held back)")
    for measured in (4, 8, 20):
        print(f"\nwarm-up 2, measured {measured} steps")
        print(f"{'run CV':>7} {'A/A pruned':>11} {'1.3x pruned':>12} {'2x pruned':>10}")
        for cv, same, slow13, slow2 in table(draws=args.draws, seed=args.seed, measured_steps=measured):
            print(f"{cv:7.0%} {same:11.2%} {slow13:12.1%} {slow2:10.1%}")


def outrank(args: argparse.Namespace) -> None:
    print(f"The skip before pairs (speedup.outranked_before_pairs): the second candidate left unverified once the "
          f"first is promoted, {args.draws} simulated draws per cell (doctor 3 runs + 2 re-baselined; 1 search run "
          f"of the second; the first verified by the sequential rule, at most 12 pairs)")
    print(f"{'run CV':>7} {'speedup':>8} {'1st promoted':>13} {'A/A skipped':>12} {'0.8x skipped':>13} "
          f"{'0.5x skipped':>13}")
    for cv in (0.01, 0.03, 0.05, 0.10, 0.15):
        for sp in (1.3, 3.0):
            same, prom = outrank_skip_rate(cv=cv, speedup=sp, draws=args.draws, seed=args.seed)
            r8, _ = outrank_skip_rate(cv=cv, speedup=sp, draws=args.draws, seed=args.seed, second=0.8)
            r5, _ = outrank_skip_rate(cv=cv, speedup=sp, draws=args.draws, seed=args.seed, second=0.5)
            print(f"{cv:7.0%} {sp:7.1f}x {prom:13.1%} {same:12.2%} {r8:13.1%} {r5:13.1%}")


class Arm:
    """One search (pruning on or off) on one landscape and seed, with its device-seconds per trial."""

    def __init__(self, b: Bench, *, prune: bool, startup_s: float, warmup: int, measured: int, devices: int,
                 doctor: tuple[float, float]) -> None:
        self.b, self.prune, self.startup_s = b, prune, startup_s
        self.warmup, self.measured, self.devices = warmup, measured, devices
        self.cv, self.mde = doctor
        self.tuner = Tuner(b.space, memory_capacity_bytes=b.capacity, seed=b.seed, initial=[b.baseline],
                           noise_cv=self.cv)
        self.spent: list[float] = []  # cumulative device-seconds after each trial
        self.best: list[float | None] = []  # noise-free time of the fastest measured setting after each trial
        self.pruned = self.false_prunes = 0

    def step(self) -> bool:
        try:
            s = self.tuner.ask()
        except RuntimeError:
            return False
        o = self.b(s)
        steps = self.warmup + self.measured
        cost = self.startup_s
        if o.status is TrialStatus.OOM:
            cost += self.b.true_time(s) or 0.0
        else:
            gaps = self._gaps(s, o.step_time_s, steps)
            ran = steps
            target = self._target()
            if target is not None:
                for k in range(1, self.measured + 1):
                    d = judge(gaps[self.warmup:self.warmup + k].tolist(), target)
                    if d is not None:
                        ran = self.warmup + k
                        o = Outcome("pruned", step_time_s=d.bound_s, peak_memory_bytes=o.peak_memory_bytes)
                        self.pruned += 1
                        inc = self.b.true_time(self.tuner.best()[0])
                        self.false_prunes += self.b.true_time(s) < inc * (1 + self.mde)
                        break
            cost += float(gaps[:ran].sum())
        self.tuner.tell(s, o)
        self.spent.append((self.spent[-1] if self.spent else 0.0) + cost * self.devices)
        best = self.tuner.best()
        self.best.append(self.b.true_time(best[0]) if best else None)
        return True

    def _target(self) -> Target | None:
        best = self.tuner.best()
        if not self.prune or best is None:
            return None
        return Target(incumbent_s=best[1].step_time_s, incumbent_sd=self.cv, cv=self.cv, mde=self.mde,
                      warmup_steps=self.warmup, measured_steps=self.measured)

    def _gaps(self, s, step_s: float, n: int) -> np.ndarray:
        """The step lines' gaps (seconds, n of them; warm-up first) of one run of ``s`` whose steps take ``step_s``:
        the same draw in both arms (seeded by the setting and the landscape's seed)."""
        rng = np.random.default_rng(zlib.crc32(f"{self.b.seed}:{sorted(dict(s).items())}".encode()))
        arrivals = np.cumsum(np.exp(rng.normal(math.log(step_s), STEP_CV, n + 1)))
        held = rng.random(n + 1) < LATE
        arrivals = np.maximum.accumulate(arrivals + held * rng.uniform(1.0, 4.0, n + 1) * step_s)
        return np.diff(arrivals)

    def frac_at_cost(self, budget_s: float, opt: float) -> float:
        i = max((j for j, c in enumerate(self.spent) if c <= budget_s + 1e-9), default=None)
        b = None if i is None else self.best[i]
        return opt / b if b else 0.0


def search(args: argparse.Namespace) -> None:
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        base = args.workloads[seed % len(args.workloads)]
        land = Landscape(base, None)
        opt = land.optimum()
        rng = np.random.default_rng(seed)
        doc = np.exp(rng.normal(0.0, NOISE_CV, 3))
        cv = max(float(np.std(doc, ddof=1) / np.mean(doc)), 1e-3)
        doctor = (cv, mde(cv, 3))
        arms = {}
        for prune in (False, True):
            b = Bench(land, seed, "peaks")
            arm = Arm(b, prune=prune, startup_s=args.startup_steps * b.true_time(b.baseline), warmup=args.warmup,
                      measured=args.measured, devices=land.w.world_size, doctor=doctor)
            for _ in range(args.budget):
                if not arm.step():
                    break
            arms[prune] = arm
        off, on = arms[False], arms[True]
        spend = off.spent[-1]
        while on.spent[-1] < spend and len(on.spent) < 3 * args.budget and on.step():
            pass
        goal = off.best[-1]  # the setting the arm without pruning ends on: when did each arm first measure it?
        first = {p: next((a.spent[i] for i, t in enumerate(a.best) if t is not None and t <= goal * (1 + 1e-9)), None)
                 for p, a in arms.items()}
        rows.append({"landscape": land.name, "seed": seed,
                     "off": opt / off.best[-1], "on_trials": opt / on.best[args.budget - 1],
                     "on_cost": on.frac_at_cost(spend, opt), "off_s": spend,
                     "on_s_at_budget": on.spent[args.budget - 1], "to_goal_off": first[False],
                     "to_goal_on": first[True], "pruned": on.pruned,
                     "false_prunes": on.false_prunes, "on_trials_run": len(on.spent)})
        r = rows[-1]
        print(f"{r['landscape']:>22} seed {seed:2d}: off {r['off']:.3f} | on at {args.budget} trials {r['on_trials']:.3f}"
              f" ({r['on_s_at_budget'] / spend:.0%} of off's device-s), at equal device-s {r['on_cost']:.3f} "
              f"({r['on_trials_run']} trials) | pruned {r['pruned']} (not slower than the incumbent: "
              f"{r['false_prunes']}) | device-s to off's pick: off {r['to_goal_off']:.0f}, on "
              + (f"{r['to_goal_on']:.0f}" if r["to_goal_on"] is not None else "never"), flush=True)
    print(f"\n{len(rows)} paired runs, budget {args.budget} trials, start-up {args.startup_steps} baseline steps, "
          f"warm-up {args.warmup} + measured {args.measured} steps")
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    print(f"fraction of the optimum, median [min]: off {med('off'):.3f} [{min(r['off'] for r in rows):.3f}]; "
          f"on at equal trials {med('on_trials'):.3f} [{min(r['on_trials'] for r in rows):.3f}]; "
          f"on at equal device-seconds {med('on_cost'):.3f} [{min(r['on_cost'] for r in rows):.3f}]")
    print(f"device-seconds at {args.budget} trials, on / off: median "
          f"{statistics.median(r['on_s_at_budget'] / r['off_s'] for r in rows):.2f}")
    reached = [r for r in rows if r["to_goal_on"] is not None]
    print(f"off's final pick reached by on in {len(reached)}/{len(rows)} runs; device-seconds to it, on / off: median "
          f"{statistics.median(r['to_goal_on'] / r['to_goal_off'] for r in reached):.2f}" if reached else "")
    print(f"pruned trials: {sum(r['pruned'] for r in rows)} in {sum(r['on_trials_run'] for r in rows)}; not slower "
          f"than the incumbent by its noise-free time x (1 + mde): {sum(r['false_prunes'] for r in rows)}")


def cost(args: argparse.Namespace) -> None:
    import subprocess
    import time

    from infrarsi.execute.clock import first_step_s, read_clock
    from infrarsi.execute.conditions import load_of
    from infrarsi.execute.record import RunRecord
    from infrarsi.trial import TrialStatus as TS
    from infrarsi.report.cost import _phase, run_cost

    for run_dir in args.run_dir:
        trials = RunRecord(run_dir).finished()
        c = run_cost(trials)
        print(f"\n{run_dir}: {len(trials)} finished trials, {c.total_s:.1f} device-s")
        print(f"{'phase':<13} {'trials':>6} {'device-s':>9} {'share':>6} {'start-up':>9} {'steps':>8} {'tail':>6} "
              f"{'load':>10}")
        for phase, (n, dev) in c.phases.items():
            mine = [t for t in trials if _phase(t.role) == phase]
            loads = [la for t in mine if (la := load_of([t.conditions])) is not None]
            up = c.startup.get(phase, (0, 0.0))[1]
            after = c.tail.get(phase, (0, 0.0))[1]  # the last step line to the end (tail_stop.py)
            span = f"{min(loads):.1f}-{max(loads):.1f}" if loads else "?"
            print(f"{phase:<13} {n:>6} {dev:>9.1f} {dev / (c.total_s or 1):>6.0%} {up:>9.1f} "
                  f"{c.clocked_s.get(phase, 0.0) - up - after:>8.1f} {after:>6.1f} {span:>10}")
        for line in c.lines():
            if line.startswith("The harness ended"):
                print(line)
        print("start-up of an ok trial, median per phase (s): first step line = before step 1 + step 1")
        for phase in c.phases:
            firsts, steady = [], []
            for t in trials:
                if _phase(t.role) != phase or t.status is not TS.OK or not t.path:
                    continue
                f, clock = first_step_s(t.path), read_clock(t.path)
                if f is None or clock is None:
                    continue
                firsts.append(f)
                if t.metrics.step_times_s:
                    steady.append(statistics.median(t.metrics.step_times_s[1:] or t.metrics.step_times_s))
            if firsts:
                f, st = statistics.median(firsts), statistics.median(steady) if steady else 0.0
                print(f"  {phase:<13} first step line {f:6.2f}  one steady step (the log's) {st:6.2f}  "
                      f"before step 1 ~{max(0.0, f - st):6.2f}  ({len(firsts)} trials)")
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        walls.append(time.perf_counter() - t0)
    la = __import__("os").getloadavg()[0]
    print(f"\ninterpreter + import torch here: {statistics.median(walls):.2f} s (median of 3; "
          f"{', '.join(f'{w:.2f}' for w in walls)}) at load average {la:.1f}")


def real(args: argparse.Namespace) -> None:
    import tempfile

    from infrarsi.adapters import run_adapter
    from infrarsi.contract import load_locked
    from infrarsi.doctor.baseline import load_noise
    from infrarsi.execute.local import LocalExecutor
    from infrarsi.execute.record import RunRecord
    from infrarsi.execute.runner import Runner

    contract, noise = load_locked(args.run_dir), load_noise(args.run_dir)
    if noise is None:
        raise SystemExit(f"no noise profile in {args.run_dir}: run `infrarsi doctor --run-dir {args.run_dir}` first")
    adapter = run_adapter(contract.workload.adapter, args.run_dir)
    timing = contract.invariants.timing
    last, pruned = noise.median_step_s, 0
    print(f"{contract.name}: doctor CV {noise.cv:.1%}, mde {noise.mde:.1%}, median {noise.median_step_s:.4g} s/step")
    with tempfile.TemporaryDirectory() as d, Runner(RunRecord(d), LocalExecutor(), adapter, contract) as runner:
        for i in range(args.trials):
            target = Target(incumbent_s=last, incumbent_sd=noise.cv, cv=noise.cv, mde=noise.mde,
                            warmup_steps=timing.warmup_steps, measured_steps=timing.measured_steps)
            t = runner.submit(contract.baseline, role="aa", prune=target).result()
            pruned += t.status is TrialStatus.PRUNED
            print(f"  trial {i}: {t.status.value:7s} {t.metrics.step_time_s or 0:.4g} s/step against {last:.4g} "
                  f"x (1 + {noise.mde:.1%}); {t.cost.wall_s:.1f} s wall"
                  + (f"; {t.reason}" if t.status is not TrialStatus.OK else ""), flush=True)
            if t.status is TrialStatus.OK:
                last = t.metrics.step_time_s
    print(f"A/A with real {contract.name} trials: {pruned} of {args.trials} pruned")


def _clocked(trial_dir: Path) -> tuple[float | None, float | None]:
    """(the first output line's arrival, the last step line's), seconds from the launch, by the harness's clock."""
    from infrarsi.execute.clock import last_step_s, read_clock

    clock = read_clock(trial_dir)
    if clock is None:
        return None, None
    firsts = [a[0] for a in (clock.get("arrivals_s"), (clock.get("stderr") or {}).get("arrivals_s")) if a]
    return min(firsts, default=None), last_step_s(trial_dir)


def _timeline(trial_dir: Path) -> list[tuple[float, str, str]]:
    """Every output line of a trial with its arrival (seconds from the launch, the harness's clock), in order."""
    from infrarsi.execute.clock import pipe_lines, read_clock

    clock = read_clock(trial_dir) or {}
    out = []
    err = (clock.get("stderr") or {}).get("arrivals_s")
    for name, arrivals in (("stdout", clock.get("arrivals_s")), ("stderr", err)):
        lines = pipe_lines((trial_dir / name).read_bytes()) if (trial_dir / name).is_file() else []
        out += [(a, name, ln.decode(errors="replace").rstrip()[:160]) for a, ln in zip(arrivals or [], lines)]
    return sorted(out)


def _alternating(repeats: int):
    """(pair, arm) for ``repeats`` pairs of "off" and "on", the order alternating from pair to pair (ABBA: a drift in
    the machine's load falls on both arms alike)."""
    for i in range(repeats):
        for arm in (("off", "on") if i % 2 == 0 else ("on", "off")):
            yield i, arm


def _isolated_trial(tmp: str, name: str, adapter, contract, *, role: str, executor=None):
    """One run of ``contract``'s baseline as an isolated trial (its own run directory under ``tmp``: a lock file
    makes it one), through a Runner as the run stage's; the finished Trial."""
    from infrarsi.execute.local import LocalExecutor
    from infrarsi.execute.record import RunRecord
    from infrarsi.execute.runner import Runner

    run = Path(tmp) / f"run-{name}"
    run.mkdir()
    (run / "contract.lock").write_text("{}")  # a run directory: its trials are isolated
    with Runner(RunRecord(run), executor or LocalExecutor(), adapter, contract,
                config=Runner.Config(oversubscribe=True)) as r:
        return r.submit(contract.baseline, role=role).result()


def startup(args: argparse.Namespace) -> None:
    import importlib.util
    import os
    import shutil
    import tempfile
    import time

    from infrarsi.adapters import run_adapter
    from infrarsi.contract import load_locked
    from infrarsi.execute import bytecode
    from infrarsi.execute.clock import first_step_s
    from infrarsi.execute.local import LocalExecutor

    contract = load_locked(args.run_dir)
    adapter = run_adapter(contract.workload.adapter, args.run_dir)
    sources = []
    for name in args.checkout:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit(f"--checkout {name}: not an installed package here; name one `import {name}` finds")
        sources.append(Path(list(spec.submodule_search_locations)[0]))
    print(f"{contract.name}: {args.repeats} pairs, bytecode off vs on; sources without bytecode on PYTHONPATH: "
          f"{', '.join(args.checkout) or 'none'}")
    print("times from the launch, by the harness's clock (s): the first output line (the launcher's), the first and "
          "the last step line, the exit (wall); the step time the harness measured")
    print(f"{'pair':>4} {'arm':>4} {'status':>7} {'1st line':>9} {'1st step':>9} {'last step':>10} {'wall':>6} "
          f"{'step':>6} {'load':>5} {'one-off':>8}")
    rows: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        for i, arm in _alternating(args.repeats):
            lib = Path(tmp) / f"lib-{i}-{arm}"
            for src in sources:  # a fresh copy per trial: as git or an installer without bytecode leaves it
                shutil.copytree(src, lib / src.name, ignore=shutil.ignore_patterns("__pycache__"))
            env = {**contract.workload.env, **({"PYTHONPATH": str(lib)} if sources else {})}
            c = contract.model_copy(update={"workload": contract.workload.model_copy(update={"env": env})})
            one_off = 0.0
            if arm == "on" and sources:  # what the executor does before the trial, timed on its own here
                t0 = time.perf_counter()
                bytecode.ensure([lib])
                one_off = time.perf_counter() - t0
            t = _isolated_trial(tmp, f"{i}-{arm}", adapter, c, role="startup",
                                executor=LocalExecutor(LocalExecutor.Config(precompile=arm == "on")))
            first = first_step_s(Path(t.path)) if t.path else None
            line, last = _clocked(Path(t.path)) if t.path else (None, None)
            la = os.getloadavg()[0]
            if first is not None:
                rows[arm].append(first)
            nan = float("nan")
            print(f"{i:>4} {arm:>4} {t.status.value:>7} {line or nan:>9.2f} {first or nan:>9.2f} "
                  f"{last or nan:>10.2f} {t.cost.wall_s:>6.1f} {t.metrics.step_time_s or nan:>6.2f} {la:>5.1f} "
                  f"{one_off:>8.2f}", flush=True)
            if args.timeline and t.path:  # each line as the harness's clock saw it (blank lines left out)
                for a, name, text in _timeline(Path(t.path)):
                    if text.strip():
                        print(f"      {a:8.3f} {name[3]} {text}")
            shutil.rmtree(lib, ignore_errors=True)
    med = {a: statistics.median(v) for a, v in rows.items() if v}
    if len(med) == 2:
        print(f"median first step line: off {med['off']:.2f} s, on {med['on']:.2f} s "
              f"(on - off {med['on'] - med['off']:+.2f} s; {len(rows['off'])} and {len(rows['on'])} trials)")


def tail(args: argparse.Namespace) -> None:
    import os
    import tempfile

    from infrarsi.adapters import run_adapter
    from infrarsi.contract import load_locked
    from infrarsi.execute.clock import last_step_s

    contract = load_locked(args.run_dir)
    adapter = run_adapter(contract.workload.adapter, args.run_dir)
    print(f"{contract.name}: {args.repeats} pairs, budget.end_at_last_step off vs on (the baseline, isolated trials)")
    print("times from the launch, by the harness's clock (s): the last step line, the end (wall), the tail between "
          "them; the step time the harness measured (s), the peak memory the record keeps (MiB)")
    print(f"{'pair':>4} {'arm':>4} {'status':>7} {'last step':>10} {'wall':>6} {'tail':>6} {'step':>6} {'peak':>7} "
          f"{'load':>5}")
    tails: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="bench-tail-") as tmp:
        for i, arm in _alternating(args.repeats):
            c = contract.model_copy(update={"budget": contract.budget.model_copy(
                update={"end_at_last_step": arm == "on"})})
            t = _isolated_trial(tmp, f"{i}-{arm}", adapter, c, role="tail")
            last = last_step_s(Path(t.path)) if t.path else None
            la = os.getloadavg()[0]
            nan = float("nan")
            gap = t.cost.wall_s - last if last is not None else nan
            if last is not None and t.status is TrialStatus.OK:
                tails[arm].append(gap)
            peak = (t.metrics.peak_memory_bytes or nan) / 2**20
            print(f"{i:>4} {arm:>4} {t.status.value:>7} {last or nan:>10.2f} {t.cost.wall_s:>6.1f} {gap:>6.2f} "
                  f"{t.metrics.step_time_s or nan:>6.2f} {peak:>7.1f} {la:>5.1f}", flush=True)
    med = {a: statistics.median(v) for a, v in tails.items() if v}
    if len(med) == 2:
        print(f"median tail after the last step line: off {med['off']:.2f} s, on {med['on']:.2f} s: "
              f"{med['off'] - med['on']:.2f} s saved per trial ({len(tails['off'])} and {len(tails['on'])} ok trials)")


def warmup(args: argparse.Namespace) -> None:
    import os
    import tempfile

    from infrarsi.adapters import run_adapter
    from infrarsi.contract import load_locked
    from infrarsi.execute.clock import first_step_s, last_step_s
    from infrarsi.trial import WARMUP_ROLE

    contract = load_locked(args.run_dir)
    adapter = run_adapter(contract.workload.adapter, args.run_dir)
    print(f"{contract.name}: {args.repeats} pairs, the warm-up run whole (ended at its last step) vs ended after its "
          f"first step line (the baseline, isolated trials)")
    print("times from the launch, by the harness's clock (s): the first and the last step line, the end (wall); "
          "device-seconds (wall x devices)")
    print(f"{'pair':>4} {'arm':>5} {'status':>7} {'1st step':>9} {'last step':>10} {'wall':>6} {'dev-s':>6} "
          f"{'load':>5}")
    cost: dict[str, list[float]] = {"whole": [], "first": []}
    with tempfile.TemporaryDirectory(prefix="bench-warmup-") as tmp:
        for i, on in _alternating(args.repeats):
            arm = "first" if on == "on" else "whole"
            t = _isolated_trial(tmp, f"{i}-{arm}", adapter, contract,
                                role=WARMUP_ROLE if arm == "first" else "doctor")
            first, last = (first_step_s(Path(t.path)), last_step_s(Path(t.path))) if t.path else (None, None)
            la = os.getloadavg()[0]
            nan = float("nan")
            if t.status is TrialStatus.OK:
                cost[arm].append(t.cost.device_s)
            print(f"{i:>4} {arm:>5} {t.status.value:>7} {first or nan:>9.2f} {last or nan:>10.2f} "
                  f"{t.cost.wall_s:>6.1f} {t.cost.device_s:>6.1f} {la:>5.1f}", flush=True)
    med = {a: statistics.median(v) for a, v in cost.items() if v}
    if len(med) == 2:
        print(f"median warm-up: whole {med['whole']:.1f} device-s, ended after its first step line "
              f"{med['first']:.1f} device-s: {med['whole'] - med['first']:.1f} device-s saved per tune "
              f"({len(cost['whole'])} and {len(cost['first'])} ok trials)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("aa", help="A/A false-prune rate and power on simulated draws")
    a.add_argument("--draws", type=int, default=2000)
    a.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("search", help="the search with pruning on vs off, paired, on the simulated landscapes")
    s.add_argument("--seeds", type=int, default=10)
    s.add_argument("--first-seed", type=int, default=0)
    s.add_argument("--budget", type=int, default=20)
    s.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    s.add_argument("--startup-steps", type=float, default=10.0, help="a trial's start-up, in baseline steps")
    s.add_argument("--warmup", type=int, default=3)
    s.add_argument("--measured", type=int, default=20)
    o = sub.add_parser("outrank", help="A/A of the skip before pairs of a candidate outranked by a promoted one")
    o.add_argument("--draws", type=int, default=2000)
    o.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("cost", help="where a recorded run's device time went: phases, start-up and steps, load")
    c.add_argument("--run-dir", type=Path, nargs="+", required=True)
    u = sub.add_parser("startup", help="the harness's bytecode off vs on: start-up of real isolated trials, paired")
    u.add_argument("--run-dir", type=Path, required=True)
    u.add_argument("--repeats", type=int, default=3)
    u.add_argument("--checkout", nargs="*", default=[], help="installed packages run as copies without bytecode")
    u.add_argument("--timeline", action="store_true", help="print every output line of each trial with its arrival")
    t = sub.add_parser("tail", help="the end at the last step off vs on: real isolated trials' tails, paired")
    t.add_argument("--run-dir", type=Path, required=True)
    t.add_argument("--repeats", type=int, default=2)
    w = sub.add_parser("warmup", help="the doctor's warm-up whole vs ended after its first step line, paired")
    w.add_argument("--run-dir", type=Path, required=True)
    w.add_argument("--repeats", type=int, default=3)
    r = sub.add_parser("real", help="A/A with real trials of a run directory's baseline")
    r.add_argument("--run-dir", type=Path, required=True)
    r.add_argument("--trials", type=int, default=8)
    args = ap.parse_args(argv)
    {"aa": aa, "search": search, "real": real, "outrank": outrank, "cost": cost,
     "startup": startup, "tail": tail, "warmup": warmup}[args.cmd](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
