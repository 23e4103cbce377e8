"""The kernel verdicts of one run, recorded at its start, and the workload's check against them.

    path = record(run_dir, {"kernels/rmsnorm/x.py@rows16": {"op": "rmsnorm", "verdict": "pass", "sha256": ...}})
    adapter = pinned(adapter, path)       # every launch carries INFRARSI_KERNEL_VERDICTS=<path> and the pins
    refusal(op, "kernels/rmsnorm/x.py@rows16")  # in the training process: None, or why it must not run

A verdict and a pin belong to one candidate value, ``PATH`` or ``PATH@VARIANT`` (loader.py), keyed by its file
resolved plus the variant (loader.spec_key): a variant that passed does not admit another variant of the same
file, and the sha256 is the file's, so a changed byte refuses every variant of it.

The run stage verifies each candidate once, when it starts, and writes the run's verdict file
(RunDir.verdicts_path; only the run stage writes it). A trial's workload re-hashes the file it is about to import and refuses it
when the bytes are not the ones that passed (time of check vs time of use), when it never passed, or when
a trial of this run caught it drifting in situ (``disqualify``: it is then refused for the rest of the run).

The file is one of the run's sealed records (rundir/chain.py): every write goes through RunDir,
so a verdict edited by hand (``fail`` -> ``pass``) is refused by run, report and apply, naming the file.

The training process needs no seal key. A trial cannot read the key nor the verdict file (its isolation hides
both, see execute/isolation.py) or may run where there is none (a Slurm node without the user's home folder), so the launch carries the
verdicts itself: ``pinned`` checks the file's seal in the stage's process, which holds the key, and puts
``INFRARSI_KERNEL_PINS`` (JSON, resolved candidate value -> its file's sha256, the candidates that pass at that
moment) into every launch's environment, which the Slurm job script exports like the rest of it. The
workload runs a candidate only when it is pinned and its bytes have that sha256; the file is then read
only to say why a candidate that is not pinned was refused. A candidate disqualified after a trial was
launched is refused from the next launch on. Without the pins (``INFRARSI_KERNEL_VERDICTS`` alone, set by
hand), the workload checks the file's seal itself, and that needs the key.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rundir import RunDir, chain
from .loader import candidate_path, spec_key

if TYPE_CHECKING:
    from ..contract.model import Contract
    from ..execute.runner import TrialAdapter
    from ..knobs import KnobSpace
    from ..trial.launch import LaunchSpec
    from ..trial.parsed import ParsedRun

ENV = "INFRARSI_KERNEL_VERDICTS"
PINS_ENV = "INFRARSI_KERNEL_PINS"  # {resolved candidate value: sha256} that passed when the trial was launched
REFUSED = "infrarsi kernel refused"  # the workload's line when it will not run a candidate
DRIFT = "infrarsi kernel spot check failed"  # the workload's line when a spot check mismatched (insitu.py)
_DRIFT_PATH = re.compile(re.escape(DRIFT) + r": (\w+)=(\S+)")


def _key(value: str | Path) -> str:
    return spec_key(value)


def same_candidate(a: str | Path, b: str | Path) -> bool:
    """Whether two candidate values name the same file and variant (however the path is written)."""
    return _key(a) == _key(b)


def verdict_file(run_dir: Path) -> Path:
    return RunDir(run_dir).verdicts_path


def record(run_dir: Path, verdicts: Mapping[str, Mapping[str, Any]]) -> Path:
    """Write the run's verdicts (candidate value -> op, verdict, sha256, reasons); keeps disqualifications
    already recorded for the same bytes (a resumed run stays as strict as it was)."""
    f = verdict_file(run_dir)
    _check_sealed(run_dir)
    old = _read(f)
    out = {}
    for p, v in verdicts.items():
        entry = {**dict(v), "path": str(p)}
        prev = old.get(_key(p))
        if prev and prev.get("verdict") == "disqualified" and prev.get("sha256") == entry.get("sha256"):
            entry = prev
        out[_key(p)] = entry
    _write(run_dir, out)
    return f


def disqualify(run_dir: Path, path: str, reason: str) -> bool:
    """Mark a candidate as caught in situ; True when it was passing until now."""
    f = verdict_file(run_dir)
    _check_sealed(run_dir)
    d = _read(f)
    e = d.get(_key(path))
    if e is None or e.get("verdict") != "pass":
        return False
    d[_key(path)] = {**e, "verdict": "disqualified", "reasons": [*e.get("reasons", []), reason]}
    _write(run_dir, d)
    return True


def drifted(evidence_lines: list[str]) -> list[tuple[str, str, str]]:
    """(op, path, line) for every spot-check failure in a trial's evidence."""
    out = []
    for ln in evidence_lines:
        m = _DRIFT_PATH.search(ln)
        if m:
            out.append((m.group(1), m.group(2), ln.strip()))
    return out


def after_trial(run_dir: Path, trial) -> list[str]:
    """Disqualify each candidate whose spot check failed in this trial; returns their paths."""
    done = []
    for _op, path, line in drifted(list(getattr(trial, "evidence", []) or [])):
        if disqualify(run_dir, path, f"numerics_drift in trial {trial.id}: {line[:300]}"):
            done.append(path)
    return done


def refusal(op: str, path: str) -> str | None:
    """In the training process: why the candidate ``path`` (PATH or PATH@VARIANT) must not run, or None. Held to the pins the
    launch carries when there are any, else to the sealed verdict file; without either (the workload run
    by hand, outside a run) there is nothing to hold it to."""
    f = os.environ.get(ENV)
    pins = os.environ.get(PINS_ENV)
    if pins is not None:
        return _pin_refusal(op, path, pins, f)
    if not f:
        return None
    if not Path(f).is_file():
        return (f"{op}={path} cannot be checked: the run's verdict file {f} cannot be read here (an isolated trial "
                f"sees no run directory; a launch by the run stage carries the verdicts in {PINS_ENV})")
    tampered = seal_problem(Path(f))
    if tampered is not None:
        return f"{op}={path} cannot be checked: {tampered}"
    d = _read(Path(f))
    e = d.get(_key(path))
    if e is None:
        return f"{op}={path} was never verified in this run ({f}); only candidates verified at run start may run"
    if e.get("verdict") != "pass":
        why = "; ".join(e.get("reasons", []))[:300]
        return f"{op}={path} is {e.get('verdict')} in this run ({why})"
    now = hashlib.sha256(candidate_path(path).read_bytes()).hexdigest()
    if now != e.get("sha256"):
        return (f"{op}={path} changed since it was verified at run start (sha256 now {now[:12]}, verified "
                f"{str(e.get('sha256'))[:12]}); verify it again with `infrarsi kernels verify {path}`")
    return None


def _pin_refusal(op: str, path: str, raw: str, f: str | None) -> str | None:
    try:
        pins = json.loads(raw)
        if not isinstance(pins, dict):
            raise ValueError("not an object")
    except ValueError as e:
        return f"{op}={path} cannot be checked: {PINS_ENV} is not a JSON object of path -> sha256 ({e}); it is set by the launch"
    pin = pins.get(_key(path))
    if pin is None:
        e = _read(Path(f)).get(_key(path)) if f else None  # read for the reason only: nothing here lets it run
        if e is not None and e.get("verdict") != "pass":
            why = "; ".join(e.get("reasons", []))[:300]
            return f"{op}={path} is {e.get('verdict')} in this run ({why})"
        return (f"{op}={path} was not a verified candidate of this run when this trial was launched ({PINS_ENV}); "
                f"only candidates verified at run start may run")
    now = hashlib.sha256(candidate_path(path).read_bytes()).hexdigest()
    if now != pin:
        return (f"{op}={path} changed since it was verified at run start (sha256 now {now[:12]}, verified "
                f"{str(pin)[:12]}); verify it again with `infrarsi kernels verify {path}`")
    return None


def pins_of(f: Path) -> dict[str, str]:
    """{resolved candidate value: sha256} of every candidate that passes in the verdict file, after checking
    its seal (raises SealError naming the file when it does not match)."""
    why = seal_problem(Path(f))
    if why is not None:
        raise chain.SealError(f"tampered records in {Path(f).parent.parent}: {why}")
    return {k: str(e.get("sha256")) for k, e in sorted(_read(Path(f)).items()) if e.get("verdict") == "pass"}


def pinned(adapter: TrialAdapter, path: Path) -> TrialAdapter:
    """The adapter, with every launch carrying ``INFRARSI_KERNEL_VERDICTS=<path>`` and the pins
    (``INFRARSI_KERNEL_PINS``) read from that file when the launch is made."""
    return Pinned(adapter, str(Path(path).resolve()))


class Pinned:
    """A :class:`~infrarsi.execute.runner.TrialAdapter` (the runner's whole view of an adapter) made of another:
    its launches carry the verdict file and the pins; the space, the trial's outputs, the parse and the clock are
    the inner adapter's."""

    def __init__(self, inner: TrialAdapter, path: str) -> None:
        self._inner, self._path = inner, path
        self.measured_time: bool = inner.measured_time

    def knob_space(self, contract: Contract) -> KnobSpace:
        return self._inner.knob_space(contract)

    def trial_form(self, contract: Contract, spec: LaunchSpec, setting: Mapping[str, Any]) -> LaunchSpec:
        out = self._inner.trial_form(contract, spec, setting)
        pins = {k: spec.env[k] for k in (ENV, PINS_ENV) if k in spec.env}  # kept last in the environment
        env = {k: v for k, v in out.env.items() if k not in pins}
        return out.model_copy(update={"env": {**env, **pins}})

    def trial_outputs(self, spec: LaunchSpec) -> LaunchSpec:
        return self._inner.trial_outputs(spec)

    def parse(self, contract: Contract, stdout: str, stderr: str, returncode: int | None) -> ParsedRun:
        return self._inner.parse(contract, stdout, stderr, returncode)

    def launch(self, contract: Contract, setting: Mapping[str, Any]) -> LaunchSpec:
        spec = self._inner.launch(contract, setting)
        pins = json.dumps(pins_of(Path(self._path)), sort_keys=True, separators=(",", ":"))
        return spec.model_copy(update={"env": {**spec.env, ENV: self._path, PINS_ENV: pins}})


def _read(f: Path) -> dict:
    try:
        return json.loads(Path(f).read_text())
    except (OSError, ValueError):
        return {}


def seal_problem(f: Path) -> str | None:
    """Why the run's verdict file ``f`` does not match the run's seals, or None (also
    for a run directory without a lock, whose records are unsealed)."""
    return RunDir(Path(f).parent.parent).verdict_problem()


def _check_sealed(run_dir: Path) -> None:
    """Refuse to rewrite a verdict file that was edited since its last sealed write (a rewrite would seal the edit)."""
    why = seal_problem(verdict_file(run_dir))
    if why is not None:
        raise chain.SealError(f"tampered records in {run_dir}: {why}")


def _write(run_dir: Path, d: dict) -> None:
    RunDir(run_dir).write_verdicts(d)
