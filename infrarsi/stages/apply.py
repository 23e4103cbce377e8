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

import math
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..apply.outcome import AppliedCandidate, ApplyOutcome


def run(run_dir: Path, *, repo: Path, dry_run: bool, console: Console, err: Console, out: dict | None = None,
        hooks: bool = True) -> int:
    """Exit 0 applied (or shown, with ``dry_run``), 3 no promoted candidate, 1 refused. ``out`` (a dict, for
    ``--json``) gets the outcome's fields: docs/cli.md#apply."""
    o = apply(run_dir, repo=repo, dry_run=dry_run, console=console, err=err, hooks=hooks)
    if out is not None:
        out.update(o.to_dict())
    return o.code


def apply(run_dir: Path, *, repo: Path, dry_run: bool, console: Console, err: Console,
          hooks: bool = True) -> ApplyOutcome:
    """apply's steps (apply/steps.py), each said as it ends; the outcome they came to."""
    from ..apply.steps import prepare, show, write
    from .init import keep_out_of_git

    p = prepare(run_dir, repo=repo, dry_run=dry_run, keep_out=lambda d: keep_out_of_git(d, err),
                warn=lambda w: err.print(f"[yellow]warning:[/] {escape(w)}", highlight=False, soft_wrap=True))
    if isinstance(p, ApplyOutcome):
        return _said(p, console, err)
    if p.plan.replaces:
        console.print(f"apply: this replaces {p.plan.replaces}", highlight=False, soft_wrap=True)
    if dry_run:
        return _said(show(p), console, err)
    return _said(write(p, hooks=hooks, say=lambda line: console.print(f"apply: {line}", markup=False, highlight=False,
                                                                       soft_wrap=True)), console, err)


def _which(c: AppliedCandidate) -> str:
    from ..verify.speedup import CI_NAME

    lo, hi = c.ci95 or (math.nan, math.nan)
    return (f"best of {c.promoted} promoted candidate(s): {', '.join(f'{k}={v}' for k, v in c.changes.items())} "
            f"({c.speedup:.3f}x, {CI_NAME} [{lo:.3f}, {hi:.3f}], trials {[list(p) for p in c.trials]})")


def _said(o: ApplyOutcome, console: Console, err: Console) -> ApplyOutcome:
    """Print the outcome: the refusal (stderr), the dry run's diff and message, or the commit made."""
    if o.refused is not None:
        err.print(f"[bold red]apply refused:[/] {escape(o.refused)}", highlight=False, soft_wrap=True)
        return o
    assert o.candidate is not None  # every outcome that is not a refusal has its candidate
    which = _which(o.candidate)
    if o.dry_run:
        console.print(f"apply --dry-run: {which}", highlight=False, soft_wrap=True)
        for n in o.notes:
            console.print(n, highlight=False, soft_wrap=True)
        console.print(o.diff or "(no change: the tree already holds this tuned launch)", markup=False, highlight=False,
                      soft_wrap=True)
        console.print("--- commit message that would be made ---", highlight=False)
        console.print(o.message, markup=False, highlight=False, soft_wrap=True)
    elif o.commit is None:
        console.print(f"apply: nothing to commit, {o.repo} already holds this tuned launch", highlight=False)
    else:
        hooks_said = (f"the repository's hooks ran: {', '.join(o.hooks_ran)}" if o.hooks_ran
                      else "the repository has no commit hooks") if o.hooks else \
            "--no-verify: the repository's hooks were not run"
        console.print(f"apply: committed {o.commit[:12]} in {o.repo}: {which}; {len(o.files)} file(s): "
                      f"{', '.join(o.files)} ({hooks_said})", highlight=False, soft_wrap=True)
    return o
