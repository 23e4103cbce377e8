"""Executor overheads: what infrarsi adds around a trial, locally and on a one-node Slurm.

    .venv/bin/python scripts/bench_execute.py [--repeats 5] [--no-slurm]

Rows (median over repeats, seconds):
  direct subprocess      `python -c pass` with subprocess.run (the floor)
  LocalExecutor          the same through submit + wait (RLIMIT wrapper, process group, log files)
  LocalExecutor isolated the same as a trial of a run: inside bubblewrap (execute/isolation.py), pids cgroup,
                         seccomp filter, the walk for run directories under the working directory (run it from
                         the repository's root: that walk is part of the cost)
  isolation overhead     isolated - LocalExecutor (target: under 0.2 s per trial)
    box built            its parts: isolation.trial_box (the walks for run directories and keys, the lists)
    bwrap /bin/true      and bwrap's mounts and namespaces around /bin/true
  record start+finish    RunRecord.start + finish of one trial (two fsync'd atomic writes)
  slurm submit->done     sbatch of `python -c pass` until its outcome is read back (needs root: starts a cluster)
  slurm 8 jobs parallel  8 such jobs submitted together, until all are done (node declares 4 CPUs)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from infrarsi.execute.executor import wait
from infrarsi.execute.local import LocalExecutor
from infrarsi.execute.record import RunRecord
from infrarsi.trial import LaunchSpec
from infrarsi.trial import Metrics, TrialStatus

FINE = {"interval_s": 0.005, "max_interval_s": 0.01}
SPEC = LaunchSpec(argv=["python", "-c", "pass"], time_limit_s=120, memory_cap_bytes=512 * 2**20)


def timed(fn, n: int) -> float:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-slurm", action="store_true")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-exec-"))
    rows = []
    rows.append(("direct subprocess", timed(lambda i: subprocess.run([sys.executable, "-c", "pass"], check=True), a.repeats)))
    ex = LocalExecutor()
    # polled every 5-10 ms: the default back-off (to 0.5 s) would round each launch up to its next poll
    rows.append(("LocalExecutor", timed(lambda i: wait(ex, ex.submit(SPEC, tmp / f"l{i}", token=f"b{i}"), **FINE),
                                        a.repeats)))
    run = tmp / "isolated"
    run.mkdir()
    (run / "contract.lock").write_text("{}")  # a run directory: its trials are isolated
    assert ex.isolates(run / "trials" / "0"), "this machine cannot isolate trials"
    rows.append(("LocalExecutor isolated", timed(lambda i: wait(ex, ex.submit(SPEC, run / "trials" / str(i),
                                                                              token=f"i{i}"), **FINE), a.repeats)))
    # the cost of the box per trial: what isolation adds to the same launch (target: under 0.2 s)
    rows.append(("isolation overhead (isolated - bare)", rows[-1][1] - rows[-2][1]))
    # its parts: building the box (the walks, the lists) and bwrap's mounts and namespaces around /bin/true
    from infrarsi.execute import isolation

    def box(i: int):
        return isolation.trial_box(run / "trials" / "0", run, argv=SPEC.argv, env={}, cwd=Path.cwd(),
                                   repository=Path.cwd())

    rows.append(("  box built (trial_box)", timed(box, a.repeats)))
    argv = box(0).argv(["/bin/true"])
    rows.append(("  bwrap /bin/true in the box", timed(lambda i: subprocess.run(argv, check=True), a.repeats)))
    rec = RunRecord(tmp / "run")

    def record(i: int) -> None:
        t = rec.start({"i": i})
        rec.finish(t.model_copy(update={"status": TrialStatus.OK, "metrics": Metrics(step_time_s=1.0)}))

    rows.append(("record start+finish", timed(record, a.repeats)))
    if not a.no_slurm:
        from infrarsi.execute.slurm import SlurmExecutor
        from infrarsi.testing.slurm import SlurmCluster

        t0 = time.perf_counter()
        with SlurmCluster(cpus=4) as c:
            rows.append(("slurm cluster up (incl. install if missing)", time.perf_counter() - t0))
            sx = SlurmExecutor(env=c.env)
            rows.append(("slurm submit->done", timed(lambda i: wait(sx, sx.submit(SPEC, tmp / f"s{i}", token=f"s{i}")), a.repeats)))

            def burst(i: int) -> None:
                hs = [sx.submit(SPEC, tmp / f"p{i}-{k}", token=f"p{i}-{k}") for k in range(8)]
                for h in hs:
                    wait(sx, h, max_interval_s=0.2)

            rows.append(("slurm 8 jobs parallel", timed(burst, max(1, a.repeats // 2))))
    w = max(len(r[0]) for r in rows)
    print(f"{'what':<{w}}  median s")
    for name, s in rows:
        print(f"{name:<{w}}  {s:8.3f}")


if __name__ == "__main__":
    main()
