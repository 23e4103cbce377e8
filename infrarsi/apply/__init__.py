"""Applying promoted changes: the tuned launch, verified kernel files, one audited git commit."""

from .gitops import GitError
from .writer import ApplyPlan, ApplyRefused, FileChange, diff, make_plan, write

__all__ = ["ApplyPlan", "ApplyRefused", "FileChange", "GitError", "diff", "make_plan", "write"]
