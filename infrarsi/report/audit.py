"""The audit: which files a candidate touches, whether each is inside the locked scope and still the
file that was verified, and whether a promoted candidate's numbers still follow from its trials.

Shared by ``infrarsi report`` (prints it) and ``infrarsi apply`` (refuses on any problem).

Scope: a path is inside ``scope.files`` when it is a normalized relative path (no ``..``, not absolute)
that ``fnmatch`` matches against one of the globs (``*`` also crosses ``/``, so ``kernels/**/*.py``
takes ``kernels/rmsnorm/x.py``). The ``..`` rule matters: ``kernels/../../etc/x.py`` matches the glob
textually but leaves the scope.

Generated candidates: a kernel the run stage generated and verified (``origin: "generated"`` in the search
record's ``kernel_verdicts``, written to ``kernels/<op>/generated/``) joined its knob's domain for
that run only, so ``scope.knobs`` does not list it. Such a value is allowed when its verdict passed and
its file is under that op's generated folder; the file audit then holds it to the same rules as a listed
candidate (inside ``scope.files``, still the bytes that passed). A run started outside the repository's
root names it by absolute path; in the repository it belongs at ``kernels/<op>/generated/<file>``.

Variants: a kernel value ``PATH@VARIANT`` (kernels/loader.py) is one named setting of the file at PATH. Its verdict
is its own (the search record's, keyed by the value); the scope, the file's sha256 and what apply writes go by PATH.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Any

from ..contract.invariants import free_knobs
from ..execute.end_to_end import pair_times
from ..trial import TrialStatus
from ..kernels.loader import generated_folder, split_spec
from ..rundir import RunDir
from ..trial.verified import VerifiedCandidate
from ..verify.speedup import speedup_ci
from .load import RunData

KERNEL_PREFIX = "kernel_"
REFERENCE = "reference"


@dataclass(frozen=True)
class FileAudit:
    path: str  # the file, where it belongs in the repository (relative); the setting's own for a listed candidate
    op: str  # kernel op, e.g. "rmsnorm"
    source: Path | None  # where the file was found now (None: missing)
    sha256: str | None  # of the file now
    verified_sha256: str | None  # recorded by the kernel verifier during the run (the search record)
    verdict: str | None  # the verifier's verdict: "pass", "fail", or None (never verified)
    scope_glob: str | None  # the scope.files glob it matched; None = outside the scope
    value: str = ""  # the setting's value as the repository names it: path, or path@VARIANT ("": path)
    # the bytes read once, the ones sha256 is of: apply commits these, never a second read of the file (which
    # could have been swapped since)
    content: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def candidate(self) -> str:
        return self.value or self.path

    @property
    def in_scope(self) -> bool:
        return self.scope_glob is not None

    @property
    def problem(self) -> str:
        """One line, "" when the file may be applied."""
        if not self.in_scope:
            return f"{self.path} is outside the locked scope (scope.files); add a glob for it to the contract"
        if self.source is None:
            return f"{self.path} does not exist any more; restore it or rerun `infrarsi run`"
        if self.verdict is None:
            return f"{self.candidate} was never verified by the kernel verifier; rerun `infrarsi run`"
        if self.verdict != "pass":
            return f"{self.candidate} failed kernel verification ({self.verdict}); it cannot be applied"
        if self.sha256 != self.verified_sha256:
            return (f"{self.path} changed since it was verified (sha256 {str(self.verified_sha256)[:12]} -> "
                    f"{str(self.sha256)[:12]}); stale candidate: rerun `infrarsi run`")
        return ""


def scope_glob(path: str, globs: Sequence[str]) -> str | None:
    """The first glob of ``scope.files`` that takes ``path``, or None (also for absolute or ``..`` paths)."""
    p = PurePosixPath(path.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or not p.parts:
        return None
    text = p.as_posix()
    return next((g for g in globs if fnmatchcase(text, g)), None)


def kernel_files(setting: Mapping[str, Any]) -> dict[str, str]:
    """op -> candidate value (``PATH`` or ``PATH@VARIANT``) for every kernel patch a setting chooses (its
    ``kernel_<op>`` knobs)."""
    out = {}
    for k, v in setting.items():
        if k.startswith(KERNEL_PREFIX) and v not in (None, REFERENCE):
            out[k[len(KERNEL_PREFIX):]] = str(v)
    return dict(sorted(out.items()))


def generated_place(path: str, op: str) -> str | None:
    """Where a generated candidate of op belongs in the repository (``kernels/<op>/generated/<file>``), or
    None when ``path`` is not in that folder (relative, or absolute with that folder as its last parts)."""
    p = PurePosixPath(path.replace("\\", "/"))
    if ".." in p.parts or len(p.parts) < 4:
        return None
    tail = PurePosixPath(*p.parts[-4:])
    if tail.parent.as_posix() != generated_folder(op) or tail.suffix != ".py":
        return None
    if not p.is_absolute() and p != tail:
        return None  # a relative path must be the folder itself, not one nested deeper
    return tail.as_posix()


def generated_passed(data: RunData) -> dict[str, dict[str, str]]:
    """op -> {the setting's value: its value in the repository (its file's place, plus any @VARIANT)} for every
    generated candidate whose verification passed in this run (the search record's kernel verdicts)."""
    out: dict[str, dict[str, str]] = {}
    for value, v in data.search.passed_generated().items():
        path, variant = split_spec(str(value))
        place = generated_place(path, v.op)
        if place is not None:
            out.setdefault(v.op, {})[str(value)] = place if variant is None else f"{place}@{variant}"
    return out


def audit_files(data: RunData, setting: Mapping[str, Any]) -> list[FileAudit]:
    verdicts = data.search.kernel_verdicts
    generated = generated_passed(data)
    out = []
    for op, value in kernel_files(setting).items():
        src = data.resolve_source(split_spec(value)[0])
        v = verdicts.get(value)
        in_repo = generated.get(op, {}).get(value, value)
        rel = split_spec(in_repo)[0]
        content = src.read_bytes() if src else None
        out.append(FileAudit(path=rel, op=op, source=src, content=content,
                             sha256=hashlib.sha256(content).hexdigest() if content is not None else None,
                             verified_sha256=v.sha256 if v else None, verdict=v.verdict if v else None,
                             scope_glob=scope_glob(rel, data.contract.scope.files), value=in_repo))
    return out


def knob_problems(data: RunData, setting: Mapping[str, Any]) -> list[str]:
    """Knob values the locked scope does not allow: a knob outside scope.knobs that moved off the
    baseline, or an in-scope knob set to a value its list does not hold."""
    scope = data.contract.scope.knobs
    base = (data.verification.baseline if data.verification else None) or data.contract.baseline
    out = []
    generated = generated_passed(data)
    space = _space(data, generated)
    derived = free_knobs(data.contract, space) if space is not None else set()
    if derived:  # a derived knob follows its parents: the space's own rules decide, not scope.knobs
        out += [f"knob setting breaks {v.constraint}: {v}" for v in space.validate(
            {k: setting.get(k, kn.default) for k, kn in ((kn.name, kn) for kn in space.knobs)})]
    for k, v in sorted(setting.items()):
        if scope and k not in scope and k not in derived:
            if k in base and base[k] != v:
                out.append(f"knob {k}={v!r} is outside the locked scope (scope.knobs); the baseline has {base[k]!r}")
            continue
        if k in scope:
            allowed = list(dict.fromkeys([*scope[k], *([REFERENCE] if k.startswith(KERNEL_PREFIX) else []),
                                          *generated.get(k.removeprefix(KERNEL_PREFIX), {})]))
            if v not in allowed:
                out.append(f"knob {k}={v!r} is not among the locked values {allowed} (scope.knobs.{k})")
    return out


def _space(data: RunData, generated: Mapping[str, Mapping[str, str]]):
    """The run's knob space as its adapter builds it, each kernel knob's domain grown by the run's passing
    generated candidates as the run stage grew it (None when the adapter cannot: the audit then goes by
    scope.knobs alone)."""
    from ..adapters import contract_adapter

    try:
        space = contract_adapter(data.contract.workload.adapter, data.contract_path).knob_space(data.contract)
    except Exception:  # noqa: BLE001 - the audit must still report a run whose adapter cannot load here
        return None
    grown = {k.name: [*k.domain, *generated[op]] for k in space.knobs
             if (op := k.name.removeprefix(KERNEL_PREFIX)) in generated and k.name.startswith(KERNEL_PREFIX)}
    if not grown:
        return space
    from ..kernels.space import extended_space

    return extended_space(space, grown)


def run_problems(data: RunData) -> list[str]:
    """Verification that no longer belongs to this lock: another contract, or older than the lock."""
    ver = data.verification
    if ver is None:
        return [f"{data.run_dir} has no {RunDir.VERIFICATION}; run `infrarsi run --run-dir {data.run_dir}` first"]
    out = []
    if ver.contract_sha256 != data.contract_sha256:
        out.append(f"contract mismatch: {RunDir.VERIFICATION} was made under contract sha256 "
                   f"{str(ver.contract_sha256)[:12]}, the lock is {data.contract_sha256[:12]}; rerun `infrarsi run`")
    fin = ver.finished_at
    if fin is None or float(fin) < data.locked_at:
        out.append(f"stale verification: finished at {fin} before the contract was locked at {data.locked_at:.0f}; "
                   f"rerun `infrarsi run`")
    return out


def recomputed_speedup(data: RunData, cand: VerifiedCandidate) -> tuple[Any, list[str]]:
    """The candidate's paired speedup recomputed from its trials on disk, and the problems found with
    those trials (missing, not verify runs, not ok, or not the settings they claim)."""
    trials = data.by_id
    base = data.verification.baseline if data.verification else {}
    problems, a_s, b_s = [], [], []
    for pair in cand.trials:
        a, b = (trials.get(int(i)) for i in pair)
        if a is None or b is None:
            problems.append(f"verification pair {list(pair)} names a trial that is not on disk")
            continue
        if a.setting != base or b.setting != cand.setting:
            problems.append(f"verification pair {list(pair)}: the trials ran other settings than recorded")
            continue
        if a.status is TrialStatus.OK and b.status is TrialStatus.OK:
            # as the verification scored the pair: held to its end-to-end time
            ta, tb, _ = pair_times(a, b, startup=data.contract.invariants.timing.startup_allowance_s)
            a_s.append(ta)
            b_s.append(tb)
    sp = speedup_ci(a_s, b_s) if len(a_s) >= 2 else None
    return sp, problems


def candidate_problems(data: RunData, cand: VerifiedCandidate, audits: list[FileAudit] | None = None) -> list[str]:
    """Everything that makes a candidate unfit to apply; [] for a promoted, verified, fresh one. ``audits``: its
    files as already read (apply checks and commits the same bytes); default: read now."""
    if not cand.promoted:
        return [f"candidate {_short(cand.setting)} was not promoted: {cand.reason}"]
    sp, out = recomputed_speedup(data, cand)
    if sp is None:
        out.append("unverified candidate: fewer than 2 ok verification pairs on disk")
    else:
        rec = math.nan if cand.speedup is None else float(cand.speedup)
        if not math.isclose(sp.speedup, rec, rel_tol=1e-9):
            out.append(f"unverified candidate: its trials give speedup {sp.speedup:.4f}, {RunDir.VERIFICATION} says {rec:.4f}")
        bar = 1.0 + (data.verification.mde if data.verification else 0.0)
        if not sp.lo > bar:
            out.append(f"unverified candidate: CI lower bound {sp.lo:.3f} <= 1 + mde = {bar:.3f}")
    out += knob_problems(data, cand.setting)
    out += [f.problem for f in (audit_files(data, cand.setting) if audits is None else audits) if f.problem]
    return out


def best_promoted(data: RunData) -> VerifiedCandidate | None:
    """The best promoted candidate: the one whose 95% CI has the highest lower bound (the speedup it is surest of),
    ties by the point estimate."""
    cands = [c for c in data.verification.promoted() if c.speedup is not None and c.ci95] if data.verification else []
    return best_of(cands)


def best_of(cands: Sequence[Any]) -> Any:
    """Of candidates with ``speedup`` and ``ci95`` (records or the --json dicts), the one with the highest lower
    bound, ties by the point estimate; None when there are none."""
    def key(c: Any) -> tuple[float, float]:
        ci, sp = (c["ci95"], c["speedup"]) if isinstance(c, dict) else (c.ci95, c.speedup)
        return float(ci[0]) if ci else -math.inf, float(sp) if sp is not None else -math.inf
    return max(cands, key=key) if cands else None


def changed(setting: Mapping[str, Any], baseline: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs a setting moves off the baseline."""
    return {k: v for k, v in setting.items() if baseline.get(k) != v}


def _short(setting: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting.items()) or "(baseline)"
