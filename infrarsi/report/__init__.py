"""Report rendering and the audit: what a run found, every number traced to trials on disk."""

from .audit import FileAudit, audit_files, best_promoted, candidate_problems, run_problems, scope_glob
from .load import RunData, RunDataError, load_run
from .render import REPORT_HTML, REPORT_MD, build, write_report

__all__ = [
    "REPORT_HTML", "REPORT_MD", "FileAudit", "RunData", "RunDataError", "audit_files", "best_promoted", "build",
    "candidate_problems", "load_run", "run_problems", "scope_glob", "write_report",
]
