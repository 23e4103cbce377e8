"""Applying promoted changes: the tuned launch, verified kernel files, one audited git commit."""

from .transaction import commit, problems
from ..gitops import GitError
from .writer import ApplyPlan, ApplyRefused, FileChange, diff, make_plan

__all__ = ["ApplyPlan", "ApplyRefused", "FileChange", "GitError", "commit", "diff", "make_plan", "problems"]
