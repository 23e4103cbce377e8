"""Known failures, and the one line each becomes at the command line.

Every stage lets these propagate; ``infrarsi.cli.main`` catches them once and prints ``explain(exc)``:
which file or service, what is wrong, and the next command. ``--debug`` shows the traceback instead.
An exception that is not known here is a bug: it keeps its traceback.

- ``RecordError``: a record file in the run directory that exists but cannot be read (truncated,
  edited, random bytes). It is never rewritten: the run stops and names it.
- ``OSError`` ENOSPC / EDQUOT / EROFS / EACCES: the disk, named by the file being written. Records are
  written atomically (``infrarsi.io.atomic_write``), so the previous version is intact.
- ``UnicodeDecodeError`` / ``ValidationError`` raised while reading a named file: see ``RecordError``.
- Slurm: ``SlurmUnreachable`` (controller down, no configuration) and ``SlurmError`` (refused).
- ``RunDirBusy``: another process holds the run directory (``infrarsi.runlock``).
- ``SettingError``: an environment variable with a value the tool cannot use; the message names it and the fix.
- ``ContractError``: a contract that cannot be used (raised by ``infrarsi.contract``); one line naming the field and the fix.
"""

from __future__ import annotations

import errno
import re
import shlex
import sys
from pathlib import Path

from .exitcodes import NO_PROMOTION as EXIT_NO_PROMOTION

# EXIT_NO_PROMOTION (3): a command that ran to its end and promoted nothing (no speedup found, or the noise means
# this budget cannot confirm one: a plain early stop), told apart from 1 (an error) and 2 (bad usage). Every exit
# code is in infrarsi/exitcodes.py.


class RecordError(RuntimeError):
    """A record file exists but cannot be read; it is left as it is."""

    def __init__(self, path: str | Path, problem: str, fix: str = "") -> None:
        self.path = Path(path)
        self.problem = problem
        self.fix = fix or (f"restore it from a copy, or move it aside (`mv {shlex.quote(str(path))} "
                           f"{shlex.quote(str(path))}.bad`) to run that part again")
        super().__init__(f"{self.path}: {problem}; it was left untouched: {self.fix}")


class ContractError(ValueError):
    """A contract that cannot be used; the message names the field and the fix."""


class SlurmUnreachable(RuntimeError):
    """The Slurm controller did not answer; one line naming SLURM_CONF and the command."""


class SlurmError(RuntimeError):
    """Slurm answered but refused (e.g. sbatch rejected the job); the message quotes it."""


class SlurmPendingTimeout(SlurmError):
    """A job waited in the queue past the contract's pending timeout; the message says why it waits."""


class RunDirBusy(RuntimeError):
    """Another live process holds the run directory."""


class FrameworkRejected(ValueError):
    """The framework's config code refused the setting; the message is the framework's own."""


class SettingError(ValueError):
    """An environment variable (``INFRARSI_*``) whose value cannot be used: one line naming it and the fix."""


def unreadable(path: str | Path, exc: BaseException) -> RecordError:
    """The RecordError for a file that failed to parse with ``exc`` (JSON, pydantic, bad bytes)."""
    return RecordError(path, f"cannot be read ({_short(exc)})")


def read_json_record(path: str | Path) -> dict | None:
    """A JSON object record: None when the file does not exist, RecordError when it exists but is not
    a readable JSON object (a record that could not be read is never silently replaced)."""
    import json

    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as e:
        raise unreadable(p, e) from e
    try:
        body = json.loads(text)
    except ValueError as e:
        raise unreadable(p, e) from e
    if not isinstance(body, dict):
        raise RecordError(p, f"holds a JSON {type(body).__name__}, not an object")
    return body


_DISK = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
         errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
         errno.EPERM: "operation not permitted", errno.EIO: "input/output error"}
_TMP = re.compile(r"^\.(.+)\.\d+\.\d+\.tmp$")  # atomic_write's temporary name: .<name>.<pid>.<tid>.tmp


def explain(exc: BaseException, argv: list[str] | None = None) -> str | None:
    """One line for a known failure (anywhere in the exception's cause/context chain); None when unknown."""
    again = rerun_line(argv)
    for e in _chain(exc):
        msg = _one(e, again)
        if msg is not None:
            return msg
    return None


def rerun_line(argv: list[str] | None = None) -> str:
    """The command line that was run, to say "then rerun `...`"."""
    args = list(sys.argv[1:] if argv is None else argv)
    return "infrarsi " + " ".join(shlex.quote(a) for a in args if a != "--debug")


def _one(e: BaseException, again: str) -> str | None:
    if isinstance(e, (RecordError, RunDirBusy, SettingError)):
        return str(e)
    if isinstance(e, SlurmPendingTimeout):
        return (f"{_oneline(str(e))}; the run stopped: free the partition (`squeue`, `sinfo`) or raise "
                f"pending_timeout_s, then rerun `{again}`")
    if isinstance(e, SlurmUnreachable):
        return (f"{_oneline(str(e))}; trials in flight stay recorded as running: start or fix the controller "
                f"(`scontrol ping`), then rerun `{again}` to adopt them")
    if isinstance(e, SlurmError):
        return f"Slurm refused: {_oneline(str(e))}; fix the job or the cluster (`sinfo`), then rerun `{again}`"
    if isinstance(e, OSError) and e.errno in _DISK:
        path = _real_path(e.filename)
        where = f" writing {path}" if path else ""
        keep = "every record is written whole or not at all, so nothing recorded was lost"
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            fix = f"free space on {_mount(path)}" if path else "free disk space"
        elif e.errno == errno.EROFS:
            fix = "use a writable --run-dir"
        else:
            fix = f"check the permissions of {path.parent if path else 'the run directory'}"
        return f"{_DISK[e.errno]}{where} ({errno.errorcode[e.errno]}); {keep}: {fix}, then rerun `{again}`"
    return None


def _chain(exc: BaseException):
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def _real_path(name) -> Path | None:
    if not name:
        return None
    p = Path(name)
    m = _TMP.match(p.name)
    return p.with_name(m.group(1)) if m else p


def _mount(path: Path) -> str:
    """The mount point holding ``path`` (for "free space on ...")."""
    p = path.resolve() if path.is_absolute() or path.exists() else Path.cwd() / path
    best = "/"
    try:
        for line in Path("/proc/self/mounts").read_text().splitlines():
            mnt = line.split()[1].replace("\\040", " ")
            if (str(p) == mnt or str(p).startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                best = mnt
    except OSError:
        pass
    return best


def _short(exc: BaseException) -> str:
    """A parse error in a few words: pydantic's first error, JSON's position, the bad byte."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            errs = errors()
        except Exception:  # noqa: BLE001 - a foreign .errors() is not ours to trust
            errs = []
        if errs:
            first = errs[0]
            loc = ".".join(str(x) for x in first.get("loc", ())) or "(top level)"
            more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
            return f"{loc}: {first.get('msg', '')}{more}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at offset {exc.start}"
    return _oneline(f"{type(exc).__name__}: {exc}")[:200]


def _oneline(text: str) -> str:
    return " ".join(text.split())
