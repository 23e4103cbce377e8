"""What ``infrarsi apply`` writes, decided before anything is written: the plan.

For the best promoted candidate (the highest lower bound of its 95% CI, ties by speedup) of a run whose verification still belongs to
its lock, the plan holds, under ``infrarsi-tuned/<contract name>/`` in the user's tree:

    (Megatron / torchtitan with a launch file) the user's own launch file, edited in place: a minimal diff
                  (:mod:`.launch_edit`); a file outside the repository is written here as an edited copy
    launch.sh     otherwise: the tuned launch (the adapter's own launch() for the setting), run from the repo root
    sbatch.sh     and the same launch as a Slurm batch job (submit from the repo root)
    profile.json  {"framework", "setting", ...} for ``infrarsi-launch --profile`` (Megatron / torchtitan)
    audit.json    contract hash, the candidate, its trials, speedup and CI, every file with its sha256

plus every verified kernel file the setting names, copied to its path inside the locked scope (a
candidate the run generated: to ``kernels/<op>/generated/``, where the run wrote it); a ``PATH@VARIANT`` value
writes and audits its file once, and the launch names the variant.
Any problem (see :mod:`infrarsi.report.audit`) refuses the whole plan with one line. The plan is written, as
one commit that holds exactly these bytes, by :mod:`.transaction`: all of it or nothing.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..adapters import Adapter, contract_adapter
from ..adapters.registry import profile_frameworks, specs
from ..adapters.workload import Workload
from ..contract.model import ENV_NAME
from ..trial import LaunchSpec
from ..launch.command import shell_join
from ..report.audit import (KERNEL_PREFIX, audit_files, best_promoted, candidate_problems, changed, run_problems)
from ..report.load import RunData
from ..rundir import RunDir
from ..trial.verified import VerifiedCandidate
from ..verify.speedup import CI_NAME

OUT_ROOT = "infrarsi-tuned"


class ApplyRefused(ValueError):
    """One line: why nothing was applied, and what to do."""


Kind = Literal["kernel", "launch", "profile", "audit"]


@dataclass(frozen=True)
class FileChange:
    path: str  # relative to the repository root, posix
    content: bytes
    why: str  # one line for the audit
    kind: Kind  # a kernel file is held to scope.files where it lands; the rest go under OUT_ROOT or edit the launch
    executable: bool = False

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


@dataclass(frozen=True)
class ApplyPlan:
    candidate: VerifiedCandidate
    changes: dict[str, Any]  # knobs moved off the baseline
    files: list[FileChange]
    message: str  # the commit message: contract hash, speedup with CI, the audit
    n_promoted: int
    replaces: str | None = None  # the earlier tuned launch this one replaces, in words (None: the first)
    warnings: tuple[str, ...] = ()  # the launch reader's, one line each (e.g. flags it had no parser to check)


def _adapter(data: RunData):
    """The run's adapter; Megatron and torchtitan read launch files relative to the contract's folder."""
    return contract_adapter(data.contract.workload.adapter, data.contract_path)


def _portable(argv: list[str]) -> list[str]:
    """This machine's interpreter path at the front becomes ``python`` (the user's environment's)."""
    return ["python", *argv[1:]] if argv and argv[0] == sys.executable else list(argv)


def _exports(env: dict[str, str]) -> list[str]:
    """``export NAME=VALUE`` lines: each value quoted, each name a name (the contract refuses others at init; a
    record made before it did is refused here, not written into a file the user runs)."""
    for k in env:
        if not ENV_NAME.fullmatch(k):
            raise ValueError(f"environment key {k!r} is no variable's name (letters, digits, '_'): not written into "
                             f"launch.sh/sbatch.sh; fix workload.env in the contract and run `infrarsi init` again")
    return [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]


def _ci(cand: VerifiedCandidate) -> tuple[float, float]:
    return cand.ci95 or (math.nan, math.nan)


def _header(data: RunData, cand: VerifiedCandidate, changes: dict[str, Any]) -> list[str]:
    lo, hi = _ci(cand)
    pairs = ", ".join(f"{a}/{b}" for a, b in cand.trials)
    return [f"# Tuned launch for contract {data.contract.name} (sha256 {data.contract_sha256[:16]}), written by `infrarsi apply`.",
            f"# Verified: speedup {cand.speedup:.3f}x, {CI_NAME} [{lo:.3f}, {hi:.3f}] over {cand.pairs} interleaved "
            f"pairs (baseline/candidate trials {pairs}).",
            f"# Knobs changed from the baseline: {_knobs(changes)}."]


def launch_script(data: RunData, spec: LaunchSpec, cand: VerifiedCandidate, changes: dict[str, Any], depth: int) -> str:
    up = "/".join([".."] * depth)
    # "$@" passes more arguments to a program given by its command; a launch read from a script has taken the
    # script's own arguments ($1, $2, ...) already (workload.script_args), so nothing may follow its last flag
    more = ' "$@"' if not data.contract.workload.launch else ""
    lines = ["#!/usr/bin/env bash", *_header(data, cand, changes),
             "# Kernel paths are relative to the repository root, so it runs from there.",
             "set -euo pipefail", f'cd "$(dirname "${{BASH_SOURCE[0]}}")/{up}"', *_exports(spec.env),
             "exec " + shell_join(_portable(spec.argv)) + more]
    return "\n".join(lines) + "\n"


def sbatch_script(data: RunData, spec: LaunchSpec, cand: VerifiedCandidate, changes: dict[str, Any]) -> str:
    argv = _portable(spec.argv)
    prog = argv[0].rsplit("/", 1)[-1]
    torchrun = prog == "torchrun" or argv[1:3] == ["-m", "torch.distributed.run"]
    has_srun = prog == "srun"
    tasks = 1 if torchrun else spec.processes  # torchrun starts its own workers: one task per node
    threads = int(spec.env.get("OMP_NUM_THREADS", "1") or 1)  # per process
    hw = data.contract.hardware
    gpus = math.ceil(hw.devices / spec.nodes)  # the contract's devices, over the launch's nodes
    lines = ["#!/bin/bash", f"#SBATCH --job-name={shlex.quote('infrarsi-' + data.contract.name)}",
             f"#SBATCH --nodes={spec.nodes}",
             f"#SBATCH --ntasks-per-node={tasks}", f"#SBATCH --cpus-per-task={threads * (spec.processes if torchrun else 1)}",
             "#SBATCH --output=infrarsi-tuned-%j.out",
             *([f"#SBATCH --gpus-per-node={gpus}"] if hw.kind.lower() != "cpu" else []),
             *_header(data, cand, changes),
             f"# Resources: the contract's {hw.devices} x {hw.kind} on {spec.nodes} node(s). No --time: the job runs "
             f"under the partition's limit (add `#SBATCH --time=...` for your training run; the contract's "
             f"{spec.time_limit_s:.0f} s was the limit of one measured trial).",
             f"# Submit from the repository root: sbatch {OUT_ROOT}/{data.contract.name}/sbatch.sh",
             "set -euo pipefail", 'cd "${SLURM_SUBMIT_DIR:-.}"', *_exports(spec.env)]
    if spec.memory_cap_bytes is not None:
        lines.append(f"ulimit -d {spec.memory_cap_bytes // 1024}  # the contract's per-process memory cap, KiB")
    if has_srun or spec.nodes * tasks == 1:
        lines.append("exec " + shell_join(argv))
    else:
        lines.append("exec " + shell_join(["srun", f"--ntasks-per-node={tasks}", *argv]))
    return "\n".join(lines) + "\n"


def _sbatch_spec(data: RunData, adapter: Adapter, setting: dict[str, Any], spec: LaunchSpec) -> LaunchSpec:
    """The launch inside job.sbatch, as the adapter builds it (Megatron rebuilds its launcher as srun; every other
    launch is wrapped as it is)."""
    return adapter.batch_launch(data.contract, setting, spec)


def run_label(run_dir: Path, repo: Path | None) -> str:
    """The run directory as the committed files name it: relative to the repository when inside it, else its name
    only. No machine path: a commit travels to other clones and machines."""
    try:
        if repo is not None:
            return Path(run_dir).resolve().relative_to(Path(repo).resolve()).as_posix()
    except ValueError:
        pass
    return f"{Path(run_dir).resolve().name} (outside the repository)"


def earlier(repo: Path | None, out: str, audit: dict[str, Any]) -> str | None:
    """The tuned launch an earlier ``apply`` committed under ``out`` (its audit.json), in words, when this plan
    replaces it with another candidate or run; None when there is none or it is this very one."""
    if repo is None:
        return None
    try:
        old = json.loads((Path(repo) / out / "audit.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(old, dict):
        return None
    keep = ("setting", "speedup", "ci95", "trials", "contract_sha256", "run")
    if all(old.get(k) == audit.get(k) for k in keep):
        return None
    sp = old.get("speedup")
    figs = f"{sp:.3f}x" if isinstance(sp, (int, float)) else "speedup unknown"
    changes = old.get("changes") if isinstance(old.get("changes"), dict) else {}
    return (f"the tuned launch committed earlier in {out} ({_knobs(changes)}; {figs}, run {old.get('run', '?')}, "
            f"contract sha256 {str(old.get('contract_sha256', '?'))[:12]})")


def _knobs(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items()) or "(none)"


def _in_place(data: RunData, adapter: Adapter, setting: dict[str, Any],
              repo: Path | None) -> tuple[list[tuple[str, FileChange]], str]:
    """The user's own launch file (``workload.launch``) and the scripts it runs to reach the launch command, each
    edited where a knob of the tuned setting is written, as changes inside ``repo`` (a file outside it is written as
    an edited copy under infrarsi-tuned/); the launch file comes first, a script the edit leaves untouched is not
    among them, each with the path the launch reader knows it by. ([], why) when the workload names no launch file or the edit cannot be made minimally (then
    launch.sh is written)."""
    from .launch_edit import EditError, edit_launch_files

    try:
        got = edit_launch_files(adapter, data.contract, setting)
    except (EditError, OSError) as e:
        return [], f"the launch file could not be edited in place ({e})"
    if got is None:
        return [], ""
    out = []
    for k, (src, edit) in enumerate(got):
        if k > 0 and not edit.changed_lines:
            continue
        key, src = str(src), Path(src).resolve()
        mode_x = os.access(src, os.X_OK)
        try:
            rel = src.relative_to(Path(repo).resolve()).as_posix() if repo is not None else None
        except ValueError:
            rel = None
        why = (f"the tuned setting as a {edit.changed_lines}-line edit of the launch the contract names" if k == 0 else
               f"the tuned setting as a {edit.changed_lines}-line edit of a script the launch runs "
               f"({got[0][0].name} runs it)")
        if rel is None:
            rel = f"{OUT_ROOT}/{data.contract.name}/{src.name}"
            why += f" ({src} is outside the repository: the edited copy)"
        out.append((key, FileChange(rel, edit.text.encode(), why, "launch", executable=mode_x)))
    return out, ""


def make_plan(data: RunData, repo: Path | None = None) -> ApplyPlan:
    """The plan for the best promoted candidate, or ApplyRefused naming the first problem. ``repo`` is the
    tree the plan is for: a launch file inside it is edited in place."""
    probs = run_problems(data)
    if probs:
        raise ApplyRefused(probs[0])
    ver = data.verification
    assert ver is not None  # run_problems refuses a run without one
    cand = best_promoted(data)
    if cand is None:
        raise ApplyRefused(f"unverified: no promoted candidate in {RunDir.VERIFICATION} ({len(ver.candidates)} "
                           f"verified, none promoted); nothing to apply")
    audits = audit_files(data, cand.setting)  # each kernel file read once: these bytes are checked and committed
    probs = candidate_problems(data, cand, audits)
    if probs:
        raise ApplyRefused(probs[0])
    setting = dict(cand.setting)
    baseline = ver.baseline
    # each kernel as the repository names it (a generated one the run named by absolute path: its place there)
    setting = {**setting, **{f"{KERNEL_PREFIX}{f.op}": f.candidate for f in audits}}
    changes = changed(setting, baseline)
    adapter = _adapter(data)
    try:
        spec = adapter.trial_form(data.contract, adapter.launch(data.contract, setting), setting)  # as verified
        sb_spec = _sbatch_spec(data, adapter, setting, spec)
    except (ValueError, OSError) as e:
        raise ApplyRefused(f"cannot emit the tuned launch: {e}") from None
    warnings = tuple(adapter.launch_warnings(data.contract))
    out = f"{OUT_ROOT}/{data.contract.name}"
    depth = len(Path(out).parts)
    files: list[FileChange] = []
    for f in {f.path: f for f in audits}.values():  # a file once, whichever of its variants the setting names
        files.append(FileChange(path=f.path, content=f.content,  # type: ignore[arg-type] (checked: not None)
                                why=f"kernel patch for {f.op} ({f.candidate}); inside scope ({f.scope_glob}); "
                                    f"verifier: {f.verdict}, sha256 matches the verified file", kind="kernel"))
    fw = data.contract.workload.adapter
    rewrites = " and ".join(s.title for s in specs() if s.rewrite_profile is not None)  # what infrarsi-launch can
    profile = {"framework": fw if fw in profile_frameworks() else None,
               "setting": {k: v for k, v in setting.items() if not k.startswith(KERNEL_PREFIX)},
               "name": data.contract.name,
               "speedup": {"speedup": cand.speedup, "ci95": list(_ci(cand)), "pairs": cand.pairs},
               "trial": [list(p) for p in cand.trials], "run": run_label(data.run_dir, repo),
               "notes": (f"infrarsi-launch --profile rewrites {rewrites} commands" if fw in profile_frameworks()
                         else f"{fw}: run launch.sh (infrarsi-launch rewrites {rewrites} commands only)")}
    owns, fallback = _in_place(data, adapter, setting, repo)
    workload = Workload(data.contract, data.contract_path.parent, adapter)
    if owns:
        edited = {key: f.content.decode() for key, f in owns[1:]}
        if differs := workload.differences(setting, owns[0][1].content.decode(), edited):
            raise ApplyRefused(f"the edited {', '.join(f.path for _, f in owns)} does not compute the user's job: "
                               f"{'; '.join(differs[:3])}")
        files += [f for _, f in owns]  # the user's launch, edited where each knob is written: a diff a person reviews
    else:
        launch = launch_script(data, spec, cand, changes, depth)
        sbatch = sbatch_script(data, sb_spec, cand, changes)
        note = f"; {fallback}" if fallback else ""
        files += [FileChange(f"{out}/launch.sh", launch.encode(), f"tuned launch (knobs within scope.knobs){note}",
                             "launch", True),
                  FileChange(f"{out}/sbatch.sh", sbatch.encode(), "tuned launch as a Slurm batch job", "launch", True)]
    files.append(FileChange(f"{out}/profile.json", (json.dumps(profile, indent=2, sort_keys=True) + "\n").encode(),
                            "profile for infrarsi-launch --profile", "profile"))
    audit = {"contract": data.contract.name, "contract_sha256": data.contract_sha256, "setting": setting,
             "changes": changes, "speedup": cand.speedup, "ci95": list(_ci(cand)), "pairs": cand.pairs,
             "trials": [list(p) for p in cand.trials], "rule": ver.rule, "mde": ver.mde,
             "verified_at": ver.finished_at, "run": run_label(data.run_dir, repo),
             "files": [{"path": f.path, "sha256": f.sha256, "why": f.why} for f in files]}
    files.append(FileChange(f"{out}/audit.json", (json.dumps(audit, indent=2, sort_keys=True) + "\n").encode(),
                            "the audit trail (this commit's evidence)", "audit"))
    n_prom = len(ver.promoted())
    replaces = earlier(repo, out, audit)
    return ApplyPlan(candidate=cand, changes=changes, files=files, n_promoted=n_prom, replaces=replaces,
                     message=_message(data, cand, changes, files, n_prom, run_label(data.run_dir, repo), replaces),
                     warnings=warnings)


def _message(data: RunData, cand: VerifiedCandidate, changes: dict[str, Any], files: list[FileChange], n_prom: int,
             run: str, replaces: str | None) -> str:
    lo, hi = _ci(cand)
    pairs = ", ".join(f"{a}/{b}" for a, b in cand.trials)
    ver = data.verification
    lines = [f"infrarsi: tuned launch for {data.contract.name}, {cand.speedup:.3f}x [{lo:.3f}, {hi:.3f}]", "",
             f"Contract: {data.contract.name}, sha256 {data.contract_sha256}",
             f"Candidate (best of {n_prom} promoted): {_knobs(changes)}",
             f"Speedup: {cand.speedup:.3f}x, {CI_NAME} [{lo:.3f}, {hi:.3f}] over {cand.pairs} interleaved pairs "
             f"(baseline/candidate trials {pairs})",
             f"Rule: {ver.rule if ver else ''} (mde {ver.mde if ver else 0:.2%})",
             f"Run directory: {run}", *([f"Replaces: {replaces}"] if replaces else []), "", "Audit:"]
    lines += [f"  {f.path}  sha256 {f.sha256}  {f.why}" for f in files]
    return "\n".join(lines) + "\n"


def diff(plan: ApplyPlan, repo: Path) -> str:
    """Unified diff of what the plan would write into ``repo`` (new files against /dev/null)."""
    out = []
    for f in plan.files:
        dest = Path(repo) / f.path
        old = dest.read_text(errors="replace") if dest.is_file() else ""
        new = f.content.decode(errors="replace")
        if old == new:
            continue
        out += difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                    fromfile=f"a/{f.path}" if dest.is_file() else "/dev/null", tofile=f"b/{f.path}")
    return "".join(out)
