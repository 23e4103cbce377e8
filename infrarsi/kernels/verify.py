"""Verify a Triton kernel candidate against its op's reference, so that no cheating kernel gets past.

    result = verify("kernels/rmsnorm/triton_rows.py@rows16")  # op from the folder name; @VARIANT: loader.py
    result.verdict   # "pass" | "fail";  result.reasons: ["code: message", ...]; result.cases

A candidate is a file, or one named setting of a file that declares VARIANTS (``PATH@VARIANT``, loader.py): the
static checks read the file's bytes (one lint for all its variants), the dynamic checks load the candidate as
the workload does, its variant's constants set, so a verdict is per candidate value.

Two stages, each failure one reason ``code: message``:

static (static.py, in this process, before anything of the candidate runs)
    a lint: an allowlist of imports, builtins and torch/triton attributes; no attribute access by computed
    name, no string evaluation, no try/except fallbacks, no monkeypatching, a @triton.jit kernel and a
    module-level forward. It refuses what an honest kernel never needs; safety does not rest on it.
dynamic (two processes: the checker here, checker.py; the candidate in a fresh Python of its own, dynamic.py,
    isolated: execute/isolation.py)
    the checker makes the inputs (fresh seeds over the shape families, production widths and the contract's model
    shape included, in fp32, bf16 and fp16), sends them to the candidate's process, gets back only tensors (the
    outputs and the gradients the candidate gave, on training-like inputs: non-leaf activations, Parameter
    weights) and compares them here with its own fp64 reference: element-wise, and the mean signed error (bias);
    non-finite, shape-dtype, same-output, input-cache, nondeterministic. The candidate's process adds what its
    watch sees (host-op, no-triton, autograd, alias, stale, mutated-input, patched, timeout): reasons to fail only.

The child process runs inside the same isolation as a trial (bubblewrap): the machine read-only, the candidate,
its reference and the Python environment readable, nothing writable but empty scratch folders, and no run
directory, experience bank, verifier cache (nor its secret), seal key, ``.git`` or home folder visible; the
runner's secrets are not in its environment; its PID namespace ends with it. Where the machine cannot isolate,
it runs unisolated (``VerifyResult.isolated`` is False and the run stage checks the repository and the run's
seals afterwards). Nothing it prints is read: its answer is tensors, judged here; the verdict is decided and
written here, never by code that ran next to the candidate.

Results are cached under $INFRARSI_CACHE/verify (default ~/.cache/infrarsi/verify) by a key over the
candidate's bytes and variant, the reference's bytes, the verifier's own source (this package's verify, dynamic,
instrument, static and loader modules), the torch and Triton versions and the device. A cached entry is used only
after re-checking it: its recorded key and candidate hash must match what is on disk now, and its
HMAC (a per-cache secret) must match its content; anything else is verified afresh.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sys
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from ..io import atomic_write
from .checker import check
from .dynamic import Case, VerifySettings, expected_cases
from .loader import Candidate, candidate_path, kernels_root, load_reference, op_of, parse_candidate, reference_path
from .static import static_check

VERIFIER_VERSION = "2"
# the modules whose source decides a verdict: a change to any of them invalidates every cached verdict
VERIFIER_SOURCES = ("verify.py", "checker.py", "dynamic.py", "instrument.py", "static.py", "loader.py")

__all__ = ["Case", "VerifySettings", "VerifyResult", "cache_dir", "cache_key", "verify"]


@dataclass(frozen=True, kw_only=True)
class VerifyResult:
    verdict: str  # "pass" | "fail"
    reasons: list[str]
    cases: list[Case]
    sha256: str  # of the candidate's file (its variants share it)
    op: str = ""
    path: str = ""  # the candidate as verified, resolved: PATH or PATH@VARIANT
    seconds: float = 0.0
    cached: bool = False
    device: str = ""
    isolated: bool = True  # the dynamic checks ran inside the isolation (False: this machine has none)

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def codes(self) -> set[str]:
        """The reason codes, e.g. {"mismatch-forward", "alias"}."""
        return {r.split(":", 1)[0] for r in self.reasons}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> VerifyResult:
        return cls(**{**d, "cases": [Case(**c) for c in d["cases"]]})


def cache_dir() -> Path:
    return Path(os.environ.get("INFRARSI_CACHE", Path.home() / ".cache" / "infrarsi")) / "verify"


def device_kind() -> str:
    """'cpu', or the CUDA device's name and compute capability (a verdict on one GPU is not another's)."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    major, minor = torch.cuda.get_device_capability()
    return f"cuda:{torch.cuda.get_device_name()}:sm{major}{minor}"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def key_parts(candidate: str | Path | Candidate, op: str, settings: VerifySettings = VerifySettings()) -> dict[str, str]:
    """What a verdict depends on, each as a hash or a version string."""
    cand = parse_candidate(candidate)
    here = Path(__file__).resolve().parent
    verifier = hashlib.sha256()
    for name in VERIFIER_SOURCES:
        verifier.update(hashlib.sha256((here / name).read_bytes()).digest())
    return {"candidate": hashlib.sha256(cand.path.read_bytes()).hexdigest(),
            "variant": json.dumps([cand.variant, [list(s) for s in cand.settings]]),
            "reference": hashlib.sha256(reference_path(op).read_bytes()).hexdigest(),
            "verifier": f"{VERIFIER_VERSION}:{verifier.hexdigest()}", "op": op,
            "torch": _version("torch"), "triton": _version("triton"), "device": device_kind(),
            "settings": hashlib.sha256(json.dumps(settings.to_json(), sort_keys=True).encode()).hexdigest()}


def cache_key(candidate: str | Path | Candidate, op: str, settings: VerifySettings = VerifySettings()) -> str:
    return hashlib.sha256(json.dumps(key_parts(candidate, op, settings), sort_keys=True).encode()).hexdigest()


def _secret() -> bytes:
    """This cache's HMAC key (created once, readable by its owner only)."""
    f = cache_dir() / "secret"
    if not f.is_file():
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(f".tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
        if not f.exists():
            tmp.replace(f)
        else:
            tmp.unlink()
    return f.read_text().strip().encode()


def _mac(body: dict) -> str:
    return hmac.new(_secret(), json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def _read_cached(entry: Path, key: str, sha: str) -> dict | None:
    """The cached result if the entry re-checks (same key, same candidate hash, valid MAC), else None."""
    try:
        d = json.loads(entry.read_text())
        body, mac = d["body"], d["mac"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if body.get("key") != key or body.get("result", {}).get("sha256") != sha:
        return None
    if not hmac.compare_digest(mac, _mac(body)):
        return None
    return body["result"]


def _write_cached(entry: Path, key: str, result: VerifyResult) -> None:
    body = {"key": key, "result": result.to_dict()}
    entry.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(entry, json.dumps({"body": body, "mac": _mac(body)}, indent=1))  # a reader never sees half a file


def verify(candidate: str | Path | Candidate, op: str | None = None, *, use_cache: bool = True,
           settings: VerifySettings = VerifySettings()) -> VerifyResult:
    """Verify a candidate, ``PATH`` or ``PATH@VARIANT``; the op defaults to the name of its file's folder. Raises
    FileNotFoundError for a missing file, loader.CandidateError for a variant its file does not declare."""
    path = candidate_path(candidate).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such candidate file")
    cand = parse_candidate(candidate).resolved()
    op = op or op_of(path)
    source = path.read_bytes()
    sha = hashlib.sha256(source).hexdigest()
    key = cache_key(cand, op, settings)
    entry = cache_dir() / f"{key}.json"
    if use_cache:
        hit = _read_cached(entry, key, sha)
        if hit is not None:  # same bytes and variant, same verdict, wherever the file is
            return VerifyResult.from_dict({**hit, "cached": True, "path": cand.spec})
    t0 = time.perf_counter()
    reasons = static_check(source.decode("utf-8", errors="replace"))
    cases: list[Case] = []
    if reasons:
        reasons.append("static: dynamic checks skipped because the static checks failed")
    else:
        reasons, cases = _dynamic_in_subprocess(cand, op, settings)
    result = VerifyResult(verdict="fail" if reasons else "pass", reasons=reasons, cases=cases, sha256=sha, op=op,
                          path=cand.spec, seconds=round(time.perf_counter() - t0, 3), device=device_kind(),
                          isolated=isolation_problem() is None)
    if use_cache and hashlib.sha256(path.read_bytes()).hexdigest() == sha:  # not rewritten meanwhile
        _write_cached(entry, key, result)
    return result


def isolation_problem() -> str | None:
    """Why the dynamic checks cannot run isolated here (one line), or None."""
    from ..execute import isolation

    return isolation.problem()


def dynamic_command(path: str | Path | Candidate, op: str, *, seccomp_fd: int | None = None) -> list[str]:
    """``python -m infrarsi.kernels.dynamic``, inside the isolation where the machine has it: the candidate's file
    and the op's reference readable, nothing of the runs, the bank, the caches, the key or ``.git``; the kernel
    keyring's calls refused by the seccomp filter in ``seccomp_fd`` (isolation.seccomp_fd), as in a trial."""
    from ..execute import isolation

    child = [sys.executable, "-m", "infrarsi.kernels.dynamic"]
    if isolation_problem() is not None:
        return child
    files = [candidate_path(path), reference_path(op), kernels_root()]
    return isolation.verification_box(files).argv(child, seccomp_fd=seccomp_fd)


def dynamic_environment() -> dict[str, str]:
    """The child's environment: the runner's, less its secrets where it runs isolated (the child sets
    TRITON_INTERPRET=1 itself when it finds no GPU)."""
    from ..execute import isolation

    return isolation.clean_environment(os.environ) if isolation_problem() is None else dict(os.environ)


def _dynamic_in_subprocess(candidate: str | Path | Candidate, op: str,
                           settings: VerifySettings) -> tuple[list[str], list[Case]]:
    """The dynamic checks: the candidate in a fresh Python of its own (TRITON_INTERPRET=1 without a GPU), isolated
    where the machine can; this process makes the inputs and compares what comes back (checker.py). Every
    (family, dtype) must be covered unless a failure is named."""
    from ..execute import isolation

    sec = isolation.seccomp_fd() if isolation_problem() is None else None
    try:
        reasons, cases = check(candidate, op, settings, command=dynamic_command(candidate, op, seccomp_fd=sec),
                               env=dynamic_environment(), pass_fds=() if sec is None else (sec,))
    finally:
        if sec is not None:
            os.close(sec)
    if not reasons:
        want = expected_cases(load_reference(op), settings)
        got = {(c.family, c.dtype) for c in cases}
        if got != want:
            reasons.append(f"error: the dynamic checks covered {len(got)} of {len(want)} (family, dtype) cases; "
                           f"missing {sorted(want - got)[:4]}")
    return reasons, cases
