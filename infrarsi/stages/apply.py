"""apply stage: write the best promoted, audited candidate into the user's git tree as ONE commit.

Exit codes (infrarsi/exitcodes.py): 0 applied (or shown), 3 the run promoted nothing (nothing to apply), 1 refused.
A run directory inside the repository is listed in its git info/exclude (stages/init.py): never the user's change.
Refuses with one line and exit 1 (writing nothing): a contract that changed since the lock or does not
match the verification, a record that does not match its seal, stale or missing verification, no promoted
candidate, a candidate whose trials no longer give its numbers, a kernel file outside the locked scope / never
verified / changed since it was verified, a knob value outside scope.knobs, a tree that is not a git work
tree, a dirty tree, or a destination apply may not write (a symlink or hard link on its way, a git-ignored
file, a stale ``index.lock``: apply/transaction.py). The commit's tree is built from the audited bytes and compared
with the audit before any file is written; the repository's hooks run as ``git commit`` runs them (a failing one
stops the commit with its output; ``hooks=False`` is ``--no-verify``); a failure after the first write puts every
file and the index back (HEAD never moved). Replacing a tuned launch an earlier apply committed is said (and in
the commit message). ``--dry-run`` prints the unified diff and the commit
message and writes nothing (a dirty tree, or a folder that is not a git tree, is then only a note).
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console


def run(run_dir: Path, *, repo: Path, dry_run: bool, console: Console, err: Console, out: dict | None = None,
        hooks: bool = True) -> int:
    """Exit 0 applied (or shown, with ``dry_run``), 3 no promoted candidate, 1 refused. ``out`` (a dict, for
    ``--json``) is filled with what happened: docs/cli.md#apply."""
    from rich.markup import escape

    from .. import exitcodes

    out = {} if out is None else out
    out.update(applied=False, dry_run=dry_run, repo=str(repo), commit=None, files=[], candidate=None, refused=None,
               replaces=None)

    from ..apply import ApplyRefused, GitError, commit, diff, make_plan, problems
    from ..gitops import dirty, toplevel
    from ..contract import ContractError
    from ..rundir.chain import SealError
    from ..report import RunDataError, load_run
    from ..verify.speedup import CI_NAME

    def refuse(msg: str, code: int = exitcodes.ERROR) -> int:
        err.print(f"[bold red]apply refused:[/] {escape(msg)}", highlight=False, soft_wrap=True)
        out["refused"] = msg
        return code

    try:
        data = load_run(run_dir)
    except SealError as e:
        return refuse(str(e))
    except ContractError as e:
        return refuse(f"contract mismatch: {e}")
    except RunDataError as e:
        return refuse(str(e))
    if data.verification is not None and not data.verification.promoted():
        n = len(data.verification.candidates)
        return refuse(f"no promoted candidate: the run finished without one ({n} verified, none faster than the "
                      f"baseline by more than its noise); nothing to apply (exit 3)", exitcodes.NO_PROMOTION)
    root = toplevel(Path(repo))
    notes = []
    if root is None:
        if not (dry_run and Path(repo).is_dir()):
            return refuse(f"{repo} is not a git work tree; pass --repo PATH of the repository to commit into")
        root = Path(repo).resolve()  # a dry run can still show what would be written
        notes.append(f"note: {root} is not a git work tree; a real apply would refuse")
        unclean = []
        is_git = False
    else:
        from .init import keep_out_of_git

        keep_out_of_git(run_dir, err)  # a run directory made before init listed it: never the user's change
        unclean = dirty(root)
        is_git = True
    if unclean and not dry_run:
        return refuse(f"the git tree {root} is dirty: {len(unclean)} change(s) of your own not committed (first: "
                      f"{unclean[0].strip()}); commit or stash them first, so the tuned change is one clean commit")
    out["repo"] = str(root)
    try:
        plan = make_plan(data, repo=root)
    except ApplyRefused as e:
        return refuse(str(e))
    for w in plan.warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}", highlight=False, soft_wrap=True)
    try:  # every destination, before anything is written
        bad = problems(plan, root, data.contract.scope.files, git=is_git, lock=not dry_run)
    except GitError as e:
        return refuse(f"{e}; nothing was written")
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return refuse(f"unsafe destination: {bad[0]}{more}; nothing was written")
    cand = plan.candidate
    lo, hi = cand.ci95 or (float("nan"), float("nan"))
    out["candidate"] = {"changes": dict(plan.changes), "speedup": cand.speedup, "ci95": list(cand.ci95 or []),
                        "trials": [list(p) for p in cand.trials], "promoted": plan.n_promoted}
    out["replaces"] = plan.replaces
    if plan.replaces:
        console.print(f"apply: this replaces {plan.replaces}", highlight=False, soft_wrap=True)
    which = (f"best of {plan.n_promoted} promoted candidate(s): {', '.join(f'{k}={v}' for k, v in plan.changes.items())} "
             f"({cand.speedup:.3f}x, {CI_NAME} [{lo:.3f}, {hi:.3f}], trials {[list(p) for p in cand.trials]})")
    if dry_run:
        console.print(f"apply --dry-run: {which}", highlight=False, soft_wrap=True)
        if unclean:
            notes.append(f"note: {root} is dirty ({len(unclean)} entries); a real apply would refuse")
        for n in notes:
            console.print(n, highlight=False, soft_wrap=True)
        text = diff(plan, root)
        console.print(text or "(no change: the tree already holds this tuned launch)", markup=False, highlight=False,
                      soft_wrap=True)
        console.print("--- commit message that would be made ---", highlight=False)
        console.print(plan.message, markup=False, highlight=False, soft_wrap=True)
        out["diff"] = text
        return exitcodes.OK
    from ..apply.transaction import hooks_present

    ran = hooks_present(root) if hooks else []
    try:
        sha, written = commit(plan, root, hooks=hooks,
                              say=lambda line: console.print(f"apply: {line}", markup=False, highlight=False,
                                                             soft_wrap=True))
    except (ApplyRefused, GitError, OSError) as e:
        return refuse(f"{e}; the repository was left as it was")
    if sha is None:
        console.print(f"apply: nothing to commit, {root} already holds this tuned launch", highlight=False)
        out["applied"] = True
        return exitcodes.OK
    hooks_said = (f"the repository's hooks ran: {', '.join(ran)}" if ran else "the repository has no commit hooks"
                  ) if hooks else "--no-verify: the repository's hooks were not run"
    console.print(f"apply: committed {sha[:12]} in {root}: {which}; {len(written)} file(s): {', '.join(written)} "
                  f"({hooks_said})", highlight=False, soft_wrap=True)
    out.update(applied=True, commit=sha, files=list(written))
    return exitcodes.OK
