"""How well the offline knowledge base predicts one-knob effects on the simulated clusters.

For every simulated workload and two reference points (the knob space's defaults, and the workload's
baseline), every knob value is changed alone; the noise-free simulator gives the true effect on log
step time (when both settings fit) and on log peak memory (always). The knowledge base's prior for
that value, built with the reference point as the defaults, is scored: 90% interval coverage, sign
agreement where the true effect exceeds 5%, mean absolute error.

    .venv/bin/python scripts/bench_priors.py
"""

from __future__ import annotations

import math
import sys
import time

from infrarsi.knobs import KnobSpace
from infrarsi.priors.offline import offline_priors
from infrarsi.trial.prior import Z90
from infrarsi.workloads import simulated as sim


def rebased(space: KnobSpace, ref) -> KnobSpace:
    return KnobSpace([k.with_domain(k.domain, ref[k.name]) for k in space.knobs], space.constraints)


def score(name: str, ref_name: str, space: KnobSpace, ref) -> list[dict]:
    w = sim.get_workload(name)
    local = rebased(space, ref)
    priors = offline_priors(local, workload=w.model.model_dump(), hardware={"kind": w.spec.name, "devices": w.world_size})
    base = sim.simulate(name, ref, noise_cv=0.0, validate=False)
    rows = []
    for p in priors:
        s = ref.replace(**{p.knob: p.value})
        if not space.is_valid(s):
            continue
        r = sim.simulate(name, s, noise_cv=0.0)
        row = {"workload": name, "ref": ref_name, "feature": p.feature, "prior": p,
               "mem": math.log(r.peak_memory_bytes / base.peak_memory_bytes), "time": None}
        if not r.oom and not base.oom:
            row["time"] = math.log(r.step_time_s / base.step_time_s)
        rows.append(row)
    return rows


def summarize(rows: list[dict], axis: str) -> tuple[int, float, float, float]:
    got = [(r[axis], getattr(r["prior"], f"{axis}_mean"), getattr(r["prior"], f"{axis}_sd")) for r in rows
           if r[axis] is not None]
    if not got:
        return 0, float("nan"), float("nan"), float("nan")
    cover = sum(abs(t - m) <= Z90 * s for t, m, s in got) / len(got)
    signed = [(t, m) for t, m, _ in got if abs(t) > 0.05]
    sign = sum((t > 0) == (m > 0) for t, m in signed) / len(signed) if signed else float("nan")
    mae = sum(abs(t - m) for t, m, _ in got) / len(got)
    return len(got), cover, sign, mae


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    verbose = "-v" in argv
    all_rows = []
    print(f"{'workload':18s} {'ref':9s} | {'n':>3s} {'time cov90':>10s} {'sign':>5s} {'MAE':>6s} | "
          f"{'n':>3s} {'mem cov90':>9s} {'sign':>5s} {'MAE':>6s}")
    for name in sim.WORKLOADS:
        space = sim.space_for(name)
        w = sim.get_workload(name)
        for ref_name, ref in (("default", space.default()), ("baseline", space.complete(w.baseline))):
            if not space.is_valid(ref):
                continue
            rows = score(name, ref_name, space, ref)
            all_rows += rows
            nt, ct, st, mt = summarize(rows, "time")
            nm, cm, sm, mm = summarize(rows, "mem")
            print(f"{name:18s} {ref_name:9s} | {nt:3d} {ct:10.0%} {st:5.0%} {mt:6.3f} | {nm:3d} {cm:9.0%} {sm:5.0%} {mm:6.3f}")
    nt, ct, st, mt = summarize(all_rows, "time")
    nm, cm, sm, mm = summarize(all_rows, "mem")
    print(f"{'all':18s} {'':9s} | {nt:3d} {ct:10.0%} {st:5.0%} {mt:6.3f} | {nm:3d} {cm:9.0%} {sm:5.0%} {mm:6.3f}")
    if verbose:
        print("\nworst misses (|truth - prior| / sd):")
        miss = []
        for r in all_rows:
            for axis in ("time", "mem"):
                if r[axis] is None:
                    continue
                m, s = getattr(r["prior"], f"{axis}_mean"), getattr(r["prior"], f"{axis}_sd")
                miss.append((abs(r[axis] - m) / s, r["workload"], r["ref"], r["feature"], axis, r[axis], m, s))
        for z, wl, ref, feat, axis, t, m, s in sorted(miss, reverse=True)[:25]:
            print(f"  z={z:5.1f} {wl:16s} {ref:8s} {feat:32s} {axis:4s} truth {t:+.3f} prior {m:+.3f}±{s:.3f}")
    print(f"\n{time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
