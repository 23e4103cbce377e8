"""apply's steps, from a run directory to one commit, each ending in an :class:`~.outcome.ApplyOutcome` when it
refuses: :func:`prepare` (the run's records, the git tree, the plan and every destination, checked before anything
is written), then :func:`show` (``--dry-run``: the diff and the message) or :func:`write` (the commit).

Nothing here prints: what the steps find is returned, and the stage (stages/apply.py) says it. The two things said
while a step runs are handed in: ``keep_out`` (the run directory listed in git's info/exclude, once the tree is
known) and ``warn`` (the launch reader's warnings, once the plan is made), and the commit's own ``say``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import exitcodes
from ..contract import ContractError
from ..gitops import GitError, dirty, toplevel
from ..report import RunDataError, load_run
from ..rundir.chain import SealError
from .outcome import AppliedCandidate, ApplyOutcome
from .transaction import commit, hooks_present, problems
from .writer import ApplyPlan, ApplyRefused, diff, make_plan


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A plan every destination of which may be written: into ``root`` (a git work tree, or for a dry run any
    folder), with the dry run's ``notes``."""

    plan: ApplyPlan
    root: Path
    candidate: AppliedCandidate
    notes: tuple[str, ...] = ()


def prepare(run_dir: Path, *, repo: Path, dry_run: bool, keep_out: Callable[[Path], None],
            warn: Callable[[str], None]) -> Prepared | ApplyOutcome:
    """The checked plan, or the outcome that refuses it (exit 3 when the run promoted nothing, else 1)."""
    shown = str(repo)

    def refused(msg: str, code: int = exitcodes.ERROR) -> ApplyOutcome:
        return ApplyOutcome(code=code, dry_run=dry_run, repo=shown, refused=msg)

    try:
        data = load_run(run_dir)
    except SealError as e:
        return refused(str(e))
    except ContractError as e:
        return refused(f"contract mismatch: {e}")
    except RunDataError as e:
        return refused(str(e))
    if data.verification is not None and not data.verification.promoted():
        n = len(data.verification.candidates)
        return refused(f"no promoted candidate: the run finished without one ({n} verified, none faster than the "
                       f"baseline by more than its noise); nothing to apply (exit 3)", exitcodes.NO_PROMOTION)
    root = toplevel(Path(repo))
    notes = []
    if root is None:
        if not (dry_run and Path(repo).is_dir()):
            return refused(f"{repo} is not a git work tree; pass --repo PATH of the repository to commit into")
        root = Path(repo).resolve()  # a dry run can still show what would be written
        notes.append(f"note: {root} is not a git work tree; a real apply would refuse")
        unclean = []
        is_git = False
    else:
        keep_out(run_dir)  # a run directory made before init listed it: never the user's change
        unclean = dirty(root)
        is_git = True
    if unclean and not dry_run:
        return refused(f"the git tree {root} is dirty: {len(unclean)} change(s) of your own not committed (first: "
                       f"{unclean[0].strip()}); commit or stash them first, so the tuned change is one clean commit")
    shown = str(root)
    try:
        plan = make_plan(data, repo=root)
    except ApplyRefused as e:
        return refused(str(e))
    for w in plan.warnings:
        warn(w)
    try:  # every destination, before anything is written
        bad = problems(plan, root, data.contract.scope.files, git=is_git, lock=not dry_run)
    except GitError as e:
        return refused(f"{e}; nothing was written")
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return refused(f"unsafe destination: {bad[0]}{more}; nothing was written")
    if unclean:
        notes.append(f"note: {root} is dirty ({len(unclean)} entries); a real apply would refuse")
    cand = plan.candidate
    chosen = AppliedCandidate(changes=dict(plan.changes), speedup=cand.speedup,
                              ci95=tuple(cand.ci95) if cand.ci95 else None,
                              trials=tuple(tuple(p) for p in cand.trials), promoted=plan.n_promoted)
    return Prepared(plan=plan, root=root, candidate=chosen, notes=tuple(notes))


def show(p: Prepared) -> ApplyOutcome:
    """``--dry-run``: the unified diff and the commit message that would be made; nothing written."""
    return ApplyOutcome(code=exitcodes.OK, dry_run=True, repo=str(p.root), candidate=p.candidate,
                        replaces=p.plan.replaces, diff=diff(p.plan, p.root), notes=p.notes, message=p.plan.message)


def write(p: Prepared, *, hooks: bool, say: Callable[[str], None]) -> ApplyOutcome:
    """The plan as one commit (``hooks``: run the repository's hooks, as ``git commit`` does; ``say``: the commit's
    own lines as it goes); a failure leaves the repository as it was and refuses."""
    base = dict(dry_run=False, repo=str(p.root), candidate=p.candidate, replaces=p.plan.replaces, hooks=hooks)
    ran = hooks_present(p.root) if hooks else []
    try:
        sha, written = commit(p.plan, p.root, hooks=hooks, say=say)
    except (ApplyRefused, GitError, OSError) as e:
        return ApplyOutcome(code=exitcodes.ERROR, refused=f"{e}; the repository was left as it was", **base)
    return ApplyOutcome(code=exitcodes.OK, applied=True, commit=sha, files=tuple(written), hooks_ran=tuple(ran), **base)
