"""Runner: up to N trials at once, each recorded from launch to verdict; resumes after a crash.

One trial, start to end (a worker thread)::

    record.start (running) -> knob-space / contract checks -> adapter.launch -> LaunchSpec
      -> launch.json (token) -> executor.submit -> launch.json (+ job id / pid), trial.json (running)
      -> poll until it ends -> adapter.parse(stdout, stderr, rc) -> classify -> loss check
      -> record.finish (status, metrics, evidence, cost = wall seconds x devices)

On one machine N is also bounded by resources: trials only start while the processes of all running
trials fit the cores (N x processes <= cores) and their memory caps fit the usable memory
(N x processes x cap <= usable), unless ``oversubscribe`` says otherwise. A trial too big for the
machine on its own still runs when nothing else does.

``resume()`` after a crash (kill -9 included): finished trials are never rerun; a trial recorded as
running is adopted when its Slurm job is still known (job id + token), otherwise it is launched again
under the same id (local processes left over from the dead runner are ended first).
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ..contract.model import FIXED_WORKLOAD_KEYS, Contract
from ..contract.numerics import Referee
from ..contract.scope import TreeGuard, open_for_writing, repository_root
from ..rundir.chain import settled_problems
from ..knobs import KnobSpace
from ..rundir import RunDir
from ..trial.parsed import ParsedRun
from .cgroup import usable_memory_bytes
from .classify import Verdict, apply_loss_check, classify
from .clock import ClockProblem, disagreement, first_step_s, last_step_s, measure, own_cpu_s, read_clock, referee
from .conditions import Watch
from .executor import STDERR, STDOUT, Executor, Handle, LaunchEnd, tail
from . import end_to_end, user_srun
from .local import kill_token, trial_env
from .memory_stop import MemoryWatch
from .prune import PruneWatch, Target
from .record import RunRecord
from .tail_stop import TailWatch, first_step_window, warmed_up
from ..trial import OUTPUTS, WARMUP_ROLE, Cost, LaunchSpec, Metrics, Trial, TrialStatus


class TrialAdapter(Protocol):
    """What the runner needs of a framework's adapter (adapters/base.py's ``Adapter`` is one): the space a setting
    is completed against, the launch of a setting, where a trial's outputs go, and what its output says."""

    measured_time: bool  # False: the trial reports its own (simulated) step time, which is then the record

    def knob_space(self, contract: Contract) -> KnobSpace: ...

    def launch(self, contract: Contract, setting: Mapping[str, Any]) -> LaunchSpec: ...

    def trial_form(self, contract: Contract, spec: LaunchSpec, setting: Mapping[str, Any]) -> LaunchSpec:
        return spec  # the launch a person runs, as a trial here runs it (no rewrite by default)

    def trial_outputs(self, spec: LaunchSpec) -> LaunchSpec: ...

    def parse(self, contract: Contract, stdout: str, stderr: str, returncode: int | None) -> ParsedRun: ...


def local_parallel_limit(requested: int, *, processes: int, cap_bytes: int | None, cores: int | None = None,
                         usable_bytes: int | None = None) -> int:
    """How many trials of this shape fit at once: min(requested, cores // processes,
    usable // (processes x cap)), at least 1."""
    cores = cores or os.cpu_count() or 1
    n = min(requested, cores // max(1, processes))
    if cap_bytes:
        usable = usable_bytes if usable_bytes is not None else usable_memory_bytes()
        n = min(n, usable // (processes * cap_bytes))
    return max(1, n)


class _Gate:
    """Admits a trial while running trials < N and (unless oversubscribing) their processes fit
    ``cores`` and their memory caps fit ``memory``. A lone trial is always admitted."""

    def __init__(self, n: int, cores: int | None, memory: int | None) -> None:
        self.n, self.cores, self.memory = n, cores, memory
        self.active = 0
        self.procs = 0
        self.mem = 0
        self._cv = threading.Condition()

    def acquire(self, procs: int, mem: int) -> None:
        with self._cv:
            while self.active and not self._fits(procs, mem):
                self._cv.wait()
            self.active += 1
            self.procs += procs
            self.mem += mem

    def _fits(self, procs: int, mem: int) -> bool:
        if self.active >= self.n:
            return False
        if self.cores is not None and self.procs + procs > self.cores:
            return False
        return self.memory is None or self.mem + mem <= self.memory

    def release(self, procs: int, mem: int) -> None:
        with self._cv:
            self.active -= 1
            self.procs -= procs
            self.mem -= mem
            self._cv.notify_all()


class Runner:
    """Runs trials through an executor and records each one. Use as a context manager, or call
    ``close()``; ``submit`` returns a Future[Trial]."""

    class Config(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")

        parallel: int = Field(1, ge=1)
        """Trials at once (the contract's budget.parallel_trials, or --parallel)."""
        oversubscribe: bool = False
        """Local executor only: allow more processes than cores and more memory than is usable."""
        cores: int | None = Field(None, ge=1)
        """Cores to plan with (default: os.cpu_count())."""
        usable_memory_bytes: int | None = Field(None, ge=1)
        """Memory to plan with (default: MemAvailable, or the cgroup limit when smaller)."""
        outside_allowance_s: float | None = Field(None, ge=0)
        """The baseline's time outside its steps (end_to_end.allowance_s of its trials): a search trial that spent
        more outside its own (beyond it, the contract's invariants.timing.startup_allowance_s and a slack) is scored by
        its end-to-end bound (execute/end_to_end.py). None: not checked."""

    def __init__(self, record: RunRecord, executor: Executor, adapter: TrialAdapter, contract: Contract, *,
                 config: Config | None = None) -> None:
        self.record, self.executor, self.adapter, self.contract = record, executor, adapter, contract
        self.config = config or Runner.Config()
        local = executor.kind == "local" and not self.config.oversubscribe
        self._gate = _Gate(self.config.parallel,
                           (self.config.cores or os.cpu_count() or 1) if local else None,
                           (self.config.usable_memory_bytes or usable_memory_bytes()) if local else None)
        self._pool = ThreadPoolExecutor(max_workers=self.config.parallel, thread_name_prefix="trial")
        self._space = adapter.knob_space(contract)
        self._handles: dict[int, Handle] = {}  # trial id -> handle, while running
        self._cancelled: set[int] = set()
        self._closing = False  # close(cancel=True) ran (Ctrl-C): a trial launched after it is cancelled at once
        self._repos: dict[Path, Path] = {}  # working directory -> repository root
        self._lock = threading.Lock()
        _hold_reserve(record.run_dir)

    # ---------------------------------------------------------------- public
    def complete(self, setting: Mapping[str, Any]) -> dict[str, Any]:
        """The full setting (knobs not named take the adapter's defaults), as recorded. Names the space
        does not know are kept, so the pre-launch check reports them instead of dropping them."""
        return {**dict(setting), **self._space.complete(setting).to_dict()}

    def submit(self, setting: Mapping[str, Any], *, role: str = "search",
               reference_losses: Referee | Sequence[float] | None = None, prune: Target | None = None) -> Future:
        """Queue one trial. The Future gives the finished Trial (any status: failures are data); it
        raises only when the infrastructure failed (e.g. SlurmUnreachable), leaving the trial
        recorded as running for a later resume. ``prune``: what the trial is held against while it runs
        (execute/prune.py); it is stopped, and recorded ``pruned``, once shown slower than that."""
        full = self.complete(setting)
        return self._pool.submit(self._run_one, full, role, reference_losses, None, None, prune=prune)

    def run(self, settings: Sequence[Mapping[str, Any]], *, role: str = "search",
            reference_losses: Referee | Sequence[float] | None = None) -> list[Trial]:
        """Run settings (up to N at once) and return their trials in the given order."""
        futs = [self.submit(s, role=role, reference_losses=reference_losses) for s in settings]
        return [f.result() for f in futs]

    def resume(self, *, roles: set[str] | None = None, reference_losses: Referee | Sequence[float] | None = None) -> list[Future]:
        """Pick up every trial recorded as running (of the given roles; default all): adopt live
        Slurm jobs, launch the rest again under the same id."""
        futs = []
        for t in self.record.running():
            if roles is not None and t.role not in roles:
                continue
            handle = self.record.handle(t.id)
            info = self.record.launch_info(t.id)
            token = info.token if info else None
            adopted = None
            if handle is None and token:
                # Crashed between writing the token and recording the job id: look the job up by token.
                handle = Handle(kind=self.executor.kind, trial_dir=str(self.record.trial_dir(t.id)), token=token,
                                job_id="", submitted_at=time.time(),
                                time_limit_s=info.spec.time_limit_s if info else 600.0)
            if handle is not None:
                if handle.kind == self.executor.kind:
                    adopted = self.executor.adopt(handle)
                elif handle.kind == "local":
                    kill_token(handle.token)
            attempt = (info.attempt if info else 0) + (0 if adopted else 1)
            futs.append(self._pool.submit(self._run_one, t.setting, t.role, reference_losses, t,
                                          adopted, attempt))
        return futs

    def cancel(self, trial_id: int) -> bool:
        """Cancel a running trial (recorded as cancelled); False when it is not running here."""
        with self._lock:
            self._cancelled.add(trial_id)
            handle = self._handles.get(trial_id)
        if handle is None:
            return False
        self.executor.cancel(handle)
        return True

    def running_ids(self) -> list[int]:
        with self._lock:
            return sorted(self._handles)

    def close(self, *, cancel: bool = False) -> None:
        if cancel:
            with self._lock:
                self._closing = True
            for tid in self.running_ids():
                try:
                    self.cancel(tid)
                except Exception:  # noqa: BLE001 - e.g. Slurm down: the trial stays recorded running for a resume
                    pass
        self._pool.shutdown(wait=True, cancel_futures=cancel)
        RunDir(self.record.run_dir).release_reserve()  # held while it runs, not after

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(cancel=exc[0] is not None)

    # ---------------------------------------------------------------- worker
    def _memory_watch(self, trial_dir: Path) -> MemoryWatch:
        """The memory stop of one trial (execute/memory_stop.py): the adapter's peak from the log so far."""
        def peak(out: str, err: str) -> float | None:
            return self.adapter.parse(self.contract, out, err, None).metrics.peak_memory_bytes

        return MemoryWatch(capacity_bytes=self.contract.hardware.memory_capacity_bytes, trial_dir=trial_dir, peak=peak)

    def _tail_watch(self, trial_dir: Path, role: str) -> TailWatch | None:
        """The end at the last step (execute/tail_stop.py), unless the contract's ``budget.end_at_last_step`` is off:
        the adapter's reading of the output so far, as the record will read it (exit status 0: a finished trial).
        A warm-up is ended after its first step line, read over a window of step 1 alone."""
        if not self.contract.budget.end_at_last_step:
            return None
        t = self.contract.invariants.timing
        first = role == WARMUP_ROLE
        contract = first_step_window(self.contract) if first else self.contract

        def parse(out: str, err: str) -> ParsedRun:
            return self.adapter.parse(contract, out, err, 0)

        if first:  # still once step 1's figures are read (the lines of later steps change nothing of its record)
            return TailWatch(trial_dir=trial_dir, parse=lambda out, err: warmed_up(parse(out, err)), last_step=1,
                             first_only=True)
        return TailWatch(trial_dir=trial_dir, parse=parse,
                         last_step=max(t.warmup_steps + t.measured_steps, self.contract.invariants.loss.compare_steps))

    def _run_one(self, setting: dict[str, Any], role: str,
                 reference: Referee | Sequence[float] | None, existing: Trial | None, adopted: Handle | None,
                 attempt: int = 0, *, prune: Target | None = None) -> Trial:
        trial = existing or self.record.start(setting, role)
        spec = self._precheck(setting)
        if isinstance(spec, Verdict):  # refused before any launch: recorded as such, never run
            return self.record.finish(trial.model_copy(update={
                "status": spec.status, "evidence": spec.evidence, "reason": spec.reason, "finished_at": time.time()}))
        limit = min(spec.time_limit_s, self.contract.invariants.timing.timeout_s)
        w = self.contract.workload
        spec = spec.model_copy(update={"time_limit_s": limit,
                                       "pending_timeout_s": self.contract.invariants.timing.pending_timeout_s,
                                       # workload.env reaches every trial of every adapter (the adapter's own win)
                                       "env": {**w.env, **spec.env}, "pass_env": list(w.pass_env),
                                       "scratch_bytes": int(self.contract.invariants.isolation.scratch_gib * 2**30)})
        procs = spec.processes * spec.nodes
        mem = (spec.memory_cap_bytes or 0) * procs
        self._gate.acquire(procs, mem)
        try:
            _check_reserve(self.record.run_dir)  # no launch that could leave the records without room
        except OSError:
            self._gate.release(procs, mem)
            raise
        relaunched: list[str] = []  # evidence of launches the scheduler held (each cancelled and launched again)
        # An isolated trial cannot write outside its directory (the repository is read-only to it): nothing to watch.
        # An unisolated one is watched: the repository is compared before and after it.
        guard = None if self.executor.isolates(self.record.trial_dir(trial.id), spec) else \
            TreeGuard(self._repo(spec), allowed=[self.record.run_dir])
        before = guard.snapshot() if guard is not None else {}
        watch = Watch()  # the machine's conditions over the trial (execute/conditions.py)
        try:
            while True:
                if adopted is not None:
                    handle = adopted
                    trial = trial.model_copy(update={"job_id": adopted.job_id})
                else:
                    trial, handle = self._launch(trial, spec, attempt)
                with self._lock:
                    self._handles[trial.id] = handle
                    cancelled_early = trial.id in self._cancelled or self._closing
                if cancelled_early:
                    self.executor.cancel(handle)
                pruner = PruneWatch(prune, lambda h=handle: self.executor.live_clock(h)) if prune is not None else None
                memory = self._memory_watch(Path(handle.trial_dir))
                tail = self._tail_watch(Path(handle.trial_dir), role)
                end, filled = _wait(self.executor, handle, self.record.run_dir, pruner, memory, tail)
                if not end.relaunch or len(relaunched) >= MAX_RELAUNCHES:
                    break
                relaunched += [*end.evidence, f"launched again (attempt {attempt + 2})"]
                adopted, attempt = None, attempt + 1
        finally:
            ended_at = time.time()  # the trial's end: its slot is free from here; what follows is bookkeeping
            self._gate.release(procs, mem)
            with self._lock:
                self._handles.pop(trial.id, None)
        conditions = watch.end(own_cpu_s=own_cpu_s(Path(handle.trial_dir)))
        freed = _keep_reserve(self.record.run_dir, Path(handle.trial_dir))
        ended = tail.decision if tail is not None and end.ended else None
        verdict = self._verdict(end, Path(handle.trial_dir), reference, trial.setting, copies=procs,
                                read=tail.text() if ended is not None else None,
                                first_step=ended is not None and ended.first_only)
        if ended is not None and verdict.status is TrialStatus.OK:  # the saving, with the harness's figures
            verdict = verdict.model_copy(update={"evidence": verdict.evidence + [
                ended.line((first_step_s if ended.first_only else last_step_s)(Path(handle.trial_dir)), end.wall_s,
                           stopped_s=ended.at_unix - handle.submitted_at if handle.kind == "local" else None)]})
        if role == "search":  # told to the search as it is; an A/B pair is held to its own baseline (pair_times)
            verdict = _end_to_end(verdict, end.wall_s, self.config.outside_allowance_s,
                                  self.contract.invariants.timing.startup_allowance_s)
        pruned = pruner.decision if pruner is not None and verdict.status is TrialStatus.CANCELLED else None
        if pruned is not None:  # stopped by the runner, not by a user: its checks below apply as to any trial
            verdict = verdict.model_copy(update={
                "status": TrialStatus.PRUNED, "evidence": verdict.evidence + [pruned.line(prune)],
                "metrics": verdict.metrics.model_copy(update={"step_time_s": pruned.bound_s}),
                "reason": f"slower than the incumbent: step time >= {pruned.bound_s * 1000:.1f} ms "
                          f"> {pruned.threshold_s * 1000:.1f} ms (stopped at step {pruned.step})"})
        over = memory.decision if pruned is None and verdict.status is TrialStatus.CANCELLED else None
        if over is not None:  # ended by the runner at its memory report: out of memory on the job's devices
            verdict = verdict.model_copy(update={
                "status": TrialStatus.OOM, "evidence": verdict.evidence + [over.line()],
                "metrics": verdict.metrics.model_copy(update={"step_time_s": None,
                                                              "peak_memory_bytes": over.peak_bytes}),
                "reason": f"out of memory: reported peak {over.peak_bytes / 2**20:.0f} MiB > capacity "
                          f"{over.capacity_bytes / 2**20:.0f} MiB (stopped at its memory report)"})
        stopped = end.cancelled and pruned is None and over is None  # cut short by a user: not held against it
        if freed:
            verdict = verdict.model_copy(update={"evidence": verdict.evidence + [freed]})
        if relaunched:
            verdict = verdict.model_copy(update={"evidence": relaunched + verdict.evidence})
        if filled:  # stopped while it ran: its outputs left the runner no room (what it measured is not scored)
            verdict = invalidate(verdict, filled)
        # the runner's own output (`infrarsi tune ... > tune.log` in the repository) is not the trial's
        wrote = guard.changes(before, ignore=open_for_writing(guard.root)) if guard is not None else []
        if wrote and not stopped:  # a trial writes only its own directory (contract/scope.py)
            why = f"wrote outside its trial directory: {wrote[0]}" + (f" (and {len(wrote) - 1} more)" if len(wrote) > 1 else "")
            verdict = invalidate(verdict, why, wrote[:10])
        if end.leftovers and not stopped:  # by construction never (a PID namespace): checked all the same
            verdict = invalidate(verdict, next((e for e in end.evidence if "still running after it ended" in e),
                                               "left processes running"))
        warnings = _unsandboxed(handle)
        if warnings:  # the run directory was writable to the trial: check every sealed record after it
            broken = settled_problems(self.record.run_dir)
            if broken and not stopped:
                verdict = invalidate(verdict, f"the run's records changed while it ran without isolation: {broken[0]}",
                                     broken[:10])
        if attempt and adopted is None:
            verdict = verdict.model_copy(update={"evidence": verdict.evidence + [
                f"launch attempt {attempt + 1}: an earlier attempt was interrupted by a restart"]})
        done = self.record.finish(trial.model_copy(update={
            "status": verdict.status, "metrics": verdict.metrics, "evidence": verdict.evidence, "reason": verdict.reason,
            "exit_code": verdict.exit_code, "signal": verdict.signal, "job_id": handle.job_id,
            "cost": Cost(wall_s=end.wall_s, devices=spec.devices), "finished_at": ended_at,
            "warnings": warnings, "conditions": conditions, "network": handle.network,
            "isolation": handle.isolation or ("bwrap" if handle.sandboxed else "")}))
        _hold_reserve(self.record.run_dir)  # given back if a full disk needed it for the records: held again
        return done

    def _repo(self, spec: LaunchSpec) -> Path:
        """The repository a trial must leave alone: the git work tree of its working directory (cached)."""
        cwd = Path(spec.cwd or Path.cwd()).resolve()
        with self._lock:
            if cwd not in self._repos:
                self._repos[cwd] = repository_root(cwd)
            return self._repos[cwd]

    def _precheck(self, setting: Mapping[str, Any]) -> LaunchSpec | Verdict:
        """The setting's launch, or why it is never launched (the one place a trial is refused before it runs): a
        fixed workload argument, a value outside the space, the framework's own validation, too many nodes here."""
        fixed = sorted(set(setting) & set(FIXED_WORKLOAD_KEYS))
        if fixed:
            return Verdict(status=TrialStatus.CONTRACT_VIOLATION, evidence=[f"sets fixed workload argument(s) {fixed}"],
                           reason="the setting would change the task (never launched)")
        bad = self._space.validate(setting)
        if bad:
            return Verdict(status=TrialStatus.INVALID, evidence=[str(v) for v in bad],
                           reason=f"{bad[0]} (never launched)")
        try:
            spec = self.adapter.launch(self.contract, setting)
            spec = self.adapter.trial_form(self.contract, spec, setting)  # the CPU launcher may refuse it here
            spec = self.adapter.trial_outputs(spec)  # checkpoints & co. into the trial's directory
        except (ValueError, TypeError) as e:  # the framework's own validation refused the setting
            return Verdict(status=TrialStatus.INVALID, evidence=[f"launch: {e}"], reason=str(e).splitlines()[0][:200])
        if self.executor.kind == "local" and user_srun.split(list(spec.argv)) is not None:
            return Verdict(status=TrialStatus.INVALID, evidence=[f"launch: {' '.join(spec.argv[:4])} ..."],
                           reason="the launch starts its own srun: run it with INFRARSI_EXECUTOR=slurm")
        if spec.nodes > 1 and self.executor.kind == "local":
            return Verdict(status=TrialStatus.INVALID,
                           evidence=[f"launch needs {spec.nodes} nodes; the local executor has one"],
                           reason=f"needs {spec.nodes} nodes: run it with INFRARSI_EXECUTOR=slurm")
        return spec

    def _launch(self, trial: Trial, spec: LaunchSpec, attempt: int) -> tuple[Trial, Handle]:
        token = uuid.uuid4().hex[:16]
        d = self.record.trial_dir(trial.id)
        spec = spec.for_trial(d)  # the adapters' output folders, inside the trial's directory
        self.record.write_launch(trial.id, handle=None, spec=spec, attempt=attempt, token=token)
        handle = self.executor.submit(spec, d, token=token)
        argv = self.executor.command_line(spec)
        trial = self.record.launched(trial, spec, handle, command=argv,
                                     env=trial_env(spec, token, d), attempt=attempt)
        return trial, handle

    def _verdict(self, end: LaunchEnd, trial_dir: Path, reference: Referee | Sequence[float] | None,
                 setting: Mapping[str, Any] | None = None, *, copies: int = 1,
                 read: tuple[str, str] | None = None, first_step: bool = False) -> Verdict:
        """``reference``: the baseline's loss trace (checked within rtol), or a calibrated loss referee
        (infrarsi.contract.numerics.Referee: loss and grad norm against the setting's band). ``copies``: the
        trial's processes, each of which may print a step's line (clock.py). ``read``: (stdout, stderr) as the
        harness read them when it ended the trial at its last step (tail_stop.py), parsed as a finished run's.
        ``first_step``: a warm-up ended after its first step line, read over a window of step 1 alone and recorded
        as such (tail_stop.warmed_up); no figure of it is data, so neither the harness's clock nor a loss check
        scores it."""
        dropped = _dropped(trial_dir)
        if dropped and not end.cancelled:  # what it printed was not all kept: nothing it printed is believed (or read)
            return invalidate(classify(end, ParsedRun(status=TrialStatus.CRASH)), dropped)
        stdout, stderr = read if read is not None else (_read_text(trial_dir / STDOUT), _read_text(trial_dir / STDERR))
        rc = 0 if read is not None else end.returncode if end.signal is None else -end.signal
        parsed: ParsedRun | None = None
        error = None
        try:
            parsed = self.adapter.parse(first_step_window(self.contract) if first_step else self.contract,
                                        stdout, stderr, rc)
        except Exception as e:  # a parser choking on garbage output is a crash of the trial, not of the runner
            error = f"{type(e).__name__}: {e}"
        v = classify(end, parsed, stdout=stdout, stderr=stderr, parse_error=error)
        if first_step:
            return warmed_up(v)
        v = _harness_time(v, self.adapter, self.contract, trial_dir, end, copies=copies)
        if isinstance(reference, Referee):  # the calibrated loss referee (contract/numerics.py)
            return reference.judge(v, setting or {})
        loss = self.contract.invariants.loss
        return apply_loss_check(v, reference, compare_steps=loss.compare_steps, rtol=loss.rtol)


UNISOLATED = "ran without isolation"  # the start of the warning an unisolated trial's record carries


def _unsandboxed(handle: Handle) -> list[str]:
    """The warning a trial's record carries when it ran without isolation ([] when it ran isolated, or had no run
    around it): it could read the run's records and write outside its directory."""
    if handle.sandboxed:  # isolated, but perhaps without a class the machine could not give (the keyring's filter)
        return [f"{UNISOLATED} from {c}; promoting on its evidence needs invariants.isolation.allow_unisolated = true "
                f"in the contract" for c in handle.unisolated]
    if handle.kind == "local" and not handle.unsandboxed_why:
        return []  # a bare trial directory: no run around it
    why = handle.unsandboxed_why or f"{handle.kind} jobs run without it"
    return [f"{UNISOLATED}: {why}; the repository and the run's seals were checked after it, and promoting on its "
            f"evidence needs invariants.isolation.allow_unisolated = true in the contract"]


def unisolated(trial: Trial) -> bool:
    """Whether a trial's record says it ran without isolation."""
    return any(w.startswith(UNISOLATED) for w in trial.warnings)


MAX_RELAUNCHES = 2  # launches of one trial the scheduler may hold before it counts as a failed trial


def invalidate(v: Verdict, why: str, evidence: Sequence[str] = ()) -> Verdict:
    """``v`` turned invalid: the one-line reason (also the last evidence line unless ``evidence`` is given), and no
    step time or throughput (nothing an invalid trial measured is scored)."""
    return v.model_copy(update={
        "status": TrialStatus.INVALID, "reason": why[:300], "evidence": v.evidence + (list(evidence) or [why]),
        "metrics": v.metrics.model_copy(update={"step_time_s": None, **dict.fromkeys(PER_STEP)})})


def _dropped(trial_dir: Path) -> str:
    """Why the runner did not keep all a trial printed (clock.MAX_BYTES, MAX_LINES, a full disk), or ""."""
    clock = read_clock(trial_dir) or {}
    for name, body in (("stdout", clock), ("stderr", clock.get("stderr") or {})):
        if body.get("dropped"):
            return f"its {name} {body['dropped']}"
    return ""


def _harness_time(v: Verdict, adapter: TrialAdapter, contract: Contract, trial_dir: Path, end: LaunchEnd, *,
                  copies: int = 1) -> Verdict:
    """An ok verdict scored by the harness's clock (clock.py): its step time becomes the one the harness measured over
    the contract's window (the log's is kept as ``reported_step_time_s``, a disagreement in the evidence); throughput
    and MFU follow. Invalid only for what load cannot cause (a tampered log, repeated lines, sleeping steps)."""
    if v.status is not TrialStatus.OK:
        return v
    t = contract.invariants.timing
    measured = adapter.measured_time
    why = referee(trial_dir, step_time_s=v.metrics.step_time_s, step_times_s=v.metrics.step_times_s,
                  warmup_steps=t.warmup_steps, measured_steps=t.measured_steps, wall_s=end.wall_s,
                  measured_time=measured, copies=copies)
    if why is not None:
        return invalidate(v, why)
    try:
        timing = (measure(trial_dir, warmup_steps=t.warmup_steps, measured_steps=t.measured_steps, copies=copies)
                  if measured else None)
    except ClockProblem as e:
        return invalidate(v, str(e))
    if timing is None:
        return _wall_bound(v, trial_dir, end.wall_s, t.warmup_steps + t.measured_steps) if measured else v
    reported = v.metrics.step_time_s
    metrics = _rescored(v.metrics, timing.step_s, reported_step_time_s=reported, steps_run=timing.steps_seen)
    note = disagreement(reported, timing)
    return v.model_copy(update={"metrics": metrics, "evidence": v.evidence + [timing.line()] + ([note] if note else [])})


def _wall_bound(v: Verdict, trial_dir: Path, wall_s: float, steps: int) -> Verdict:
    """An ok verdict whose window no step line the harness clocked shows (its log has the window, the pipe's lines do
    not: several steps' text on one line), scored by its wall time over the window's last step (start-up included:
    an upper bound); unchanged without a clock (nothing of the harness's to score it by)."""
    if read_clock(trial_dir) is None or wall_s <= 0:
        return v
    m = v.metrics
    bound = wall_s / steps
    why = (f"harness clock: no step lines of the window came through the pipe one by one (the log reports "
           f"{m.step_time_s * 1000:.1f} ms): scored by its wall time over the window's {steps} steps, "
           f"{wall_s:.3f} s / {steps} = {bound * 1000:.1f} ms (start-up included: an upper bound)")
    metrics = _rescored(m, bound, reported_step_time_s=m.step_time_s, steps_run=steps)
    return v.model_copy(update={"metrics": metrics, "evidence": v.evidence + [why]})


def _end_to_end(v: Verdict, wall_s: float, allowance: float | None, startup: float) -> Verdict:
    """An ok verdict whose figure disagrees with its wall time beyond the baseline's time outside its steps and the
    contract's ``startup`` (invariants.timing.startup_allowance_s), scored by the end-to-end bound
    (execute/end_to_end.py); throughput and MFU follow."""
    if v.status is not TrialStatus.OK:
        return v
    m = v.metrics
    out = end_to_end.bound(wall_s=wall_s, steps=m.steps_run, step_s=m.step_time_s, allowance=allowance,
                           startup=startup)
    if out is None:
        return v
    return v.model_copy(update={"metrics": _rescored(m, out[0]), "evidence": v.evidence + [out[1]]})


PER_STEP = ("tokens_per_s", "mfu", "tflops_per_device")  # figures that follow the step time (the log's, per its own)


def _rescored(m: Metrics, step_s: float, **update: Any) -> Metrics:
    """``m`` scored at ``step_s`` by the harness: the per-step figures scaled by the log's step time over it."""
    scale = m.step_time_s / step_s
    return m.model_copy(update={"step_time_s": step_s, **update,
                                **{k: getattr(m, k) * scale for k in PER_STEP if getattr(m, k) is not None}})


RESERVE_BYTES = 512 * 2**20  # free space the runner keeps on the run directory's disk for its own records
RESERVE_FRACTION = 0.125  # ... or this much of a smaller disk (a 48 MiB tmpfs keeps 6 MiB)
# Of the reserve, this much is allocated to ``runner.reserve`` while a runner runs: the records of the trials in
# flight (each trial's clock holds at most 2 x clock.MAX_LINES stamps, ~12 MB of JSON; the rest is kilobytes).
HELD_BYTES = 64 * 2**20


def _free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _room(path: Path) -> tuple[int, int]:
    """(free bytes, the reserve) on ``path``'s disk: RESERVE_BYTES, or RESERVE_FRACTION of a disk too small for it."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, min(RESERVE_BYTES, int(st.f_blocks * st.f_frsize * RESERVE_FRACTION))


def _hold_reserve(run_dir: Path) -> bool:
    """The reserve allocated to the run directory's ``runner.reserve`` (RunDir.hold_reserve): room for the records
    that no trial can take, even one that fills the disk between two polls; False where the disk lacks it."""
    try:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        return RunDir(run_dir).hold_reserve(min(HELD_BYTES, _room(run_dir)[1]))
    except OSError:
        return False


def _check_reserve(run_dir: Path) -> None:
    """ENOSPC (the run stops with one line; the trial stays recorded as running, for a resume) when the run
    directory's disk has less than the reserve free: a trial launched now could leave the runner no room."""
    free, reserve = _room(run_dir)
    if free < reserve:
        raise OSError(errno.ENOSPC, f"{free / 2**20:.0f} MiB free, under the {reserve / 2**20:.0f} MiB the "
                                    f"runner keeps for its records; no trial was launched", str(run_dir))


def _keep_reserve(run_dir: Path, trial_dir: Path) -> str:
    """After a trial: when the disk has less than the reserve free, the trial's outputs (checkpoints, TensorBoard:
    never records) are removed (links not followed) so that its record is written; evidence of it, or ""."""
    try:
        free, reserve = _room(run_dir)
    except OSError:
        return ""
    if free >= reserve:
        return ""
    for d in sorted(Path(trial_dir).glob(f"{OUTPUTS}*")):
        if d.is_dir() and not d.is_symlink():
            shutil.rmtree(d, ignore_errors=True)
        else:
            d.unlink(missing_ok=True)
    return (f"outputs removed: the disk held {free / 2**20:.0f} MiB free after the trial, under the "
            f"{reserve / 2**20:.0f} MiB kept for the run's records")


def _wait(executor: Executor, handle: Handle, run_dir: Path, pruner: PruneWatch | None = None,
          memory: MemoryWatch | None = None, tail: TailWatch | None = None) -> tuple[LaunchEnd, str]:
    """The trial's end, and why the runner stopped it ("" when it did not): a trial whose outputs take the run
    directory's disk under the reserve is cancelled while it runs (its writes are not watched, the disk's free
    space is: a statvfs per poll), so that no trial, its own or one running beside it, is left without room for
    its record. ``pruner``, ``memory``: judged per poll; a trial either stops is cancelled (its ``decision`` says
    why). ``tail``: a trial that has printed every line it is measured by is ended (``executor.end``: a finished
    trial, not a cancelled one)."""
    pause, filled, pruning = 0.02, "", False
    while True:
        out = executor.poll(handle)
        if out is not None:  # it may have filled the disk since the last poll (and been stopped for it: its copies
            # of stdout/stderr could not be written): said all the same, before its outputs are removed
            return out, filled or _filled(run_dir, stopped=out.state == "killed" and not out.timed_out)
        if not pruning and not filled and ((pruner is not None and pruner.check() is not None)
                                           or (memory is not None and memory.check() is not None)):
            pruning = True
            executor.cancel(handle)
        elif not pruning and not filled and tail is not None and tail.check() is not None:
            pruning = True
            executor.end(handle)
        if not filled:
            filled = _filled(run_dir)
            if filled:
                executor.cancel(handle)
        time.sleep(pause)
        # Local polls are a waitpid (cheap) and bound the error of the measured wall time; Slurm polls cost a client call.
        pause = min(0.2 if handle.kind == "local" else 1.0, pause * 1.5)


def _filled(run_dir: Path, *, stopped: bool = True) -> str:
    """Why a trial is invalid when the run directory's disk holds less than the runner's reserve ("" when it holds
    more); ``stopped``: the harness stopped it (else it ended by itself with the disk full)."""
    try:
        free, reserve = _room(run_dir)
    except OSError:
        free = reserve = 0
    if free >= reserve:
        return ""
    return (f"{'stopped while it ran' if stopped else 'ended with the disk full'}: the run directory's disk held "
            f"{free / 2**20:.0f} MiB free, under the {reserve / 2**20:.0f} MiB the runner keeps for its records "
            f"(its outputs filled it; free space or write less to outputs/)")


def _read_text(path: Path, max_bytes: int = 64 * 2**20) -> str:
    """A log file as text (the last ``max_bytes`` of it), "" when missing; never raises on bad bytes."""
    return tail(path, max_bytes)
