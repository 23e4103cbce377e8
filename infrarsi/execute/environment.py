"""The environment an isolated process inherits: an allowlist of names, with the values judged too.

    clean_environment(os.environ, pass_env=["WANDB_ENTITY"])   # -> what a trial inherits of the runner's

A name passes when the frameworks need it (ENV_NAMES) or it is under one of their prefixes (ENV_PREFIXES); under
HF_, TRANSFORMERS_, TOKENIZERS_, PYTHON, NCCL_, CUDA_, TORCH, PYTORCH_ and SLURM_ only the names those projects
document (ENV_DOCUMENTED, env_names.py). Dropped whatever
its prefix: a name that says it holds a secret (SECRET_NAME, SECRET_ENV_NAME: ``HF_TOKEN``, ``NCCL_DB_PASS``), and a
value that carries a credential (:func:`credential`: a URL's userinfo or query parameters, an Authorization scheme's
token, and under a name not documented a high-entropy word). ``pass_env`` (the contract's ``workload.pass_env``) is
the user's door: a name listed there passes as it is. See docs/isolation.md.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping

from ..launch.command import SECRET_NAME  # the names that say they hold a secret
from . import env_names

# The runner's variables a trial inherits (an allowlist): what the frameworks and the launchers need.
ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR", "HOSTNAME",
    "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "XDG_CACHE_HOME",
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
    "INFRARSI_TRIAL_TOKEN",
    # device and job ids whose values are UUIDs (GPU-5f3a..., MIG-..., a rendezvous id): needed as they are
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "TORCHELASTIC_RUN_ID", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS",
    "INFRARSI_SPOT_EVERY", "INFRARSI_KERNELS"})  # the kernels' checks in training (kernels/insitu.py, loader.py)
ENV_PREFIXES = ("LC_", "CUDA_", "CUDNN_", "CUBLAS", "NVIDIA_", "NVTE_", "NCCL_", "GLOO_", "UCX_", "FI_", "NVSHMEM_",
                "OMP_", "MKL_", "KMP_", "OPENBLAS_", "TORCH", "PYTORCH_", "TRITON", "HF_", "TRANSFORMERS_",
                "TOKENIZERS_", "PYTHON", "SLURM_")
# Under these prefixes only the names the frameworks document pass (Hugging Face's hub, datasets and transformers
# docs, tokenizers, CPython's command-line docs; NCCL's, CUDA's, torch's and Slurm's in env_names.py, each with its
# source); an unlisted HF_FOO, NCCL_FOO or SLURM_FOO stays out (a token under a name of the user's making: the
# contract's workload.pass_env passes it). Under the other prefixes (TRITON*, OMP_, MKL_, UCX_, ...) a name passes
# when its value is plain (listed names: when it carries no credential).
ENV_DOCUMENTED = {
    "NCCL_": env_names.NCCL, "CUDA_": env_names.CUDA, "TORCH": env_names.TORCH, "PYTORCH_": env_names.TORCH,
    "SLURM_": env_names.SLURM,
    "HF_": frozenset("""HF_HOME HF_HUB_CACHE HF_ASSETS_CACHE HF_DATASETS_CACHE HF_MODULES_CACHE HF_XET_CACHE
        HF_HUB_OFFLINE HF_DATASETS_OFFLINE HF_ENDPOINT HF_HUB_DISABLE_TELEMETRY HF_HUB_DISABLE_PROGRESS_BARS
        HF_HUB_DISABLE_SYMLINKS_WARNING HF_HUB_DISABLE_EXPERIMENTAL_WARNING
        HF_HUB_ENABLE_HF_TRANSFER HF_HUB_ETAG_TIMEOUT HF_HUB_DOWNLOAD_TIMEOUT HF_HUB_VERBOSITY
        HF_HUB_DISABLE_XET HF_XET_HIGH_PERFORMANCE HF_DATASETS_TRUST_REMOTE_CODE HF_DATASETS_IN_MEMORY_MAX_SIZE
        HF_DATASETS_DISABLE_PROGRESS_BARS HF_HUB_USER_AGENT_ORIGIN""".split()),
    "TRANSFORMERS_": frozenset("""TRANSFORMERS_CACHE TRANSFORMERS_OFFLINE TRANSFORMERS_VERBOSITY
        TRANSFORMERS_NO_ADVISORY_WARNINGS TRANSFORMERS_NO_TF""".split()),
    "TOKENIZERS_": frozenset({"TOKENIZERS_PARALLELISM"}),
    "PYTHON": frozenset("""PYTHONPATH PYTHONHASHSEED PYTHONUNBUFFERED PYTHONDONTWRITEBYTECODE PYTHONFAULTHANDLER
        PYTHONWARNINGS PYTHONIOENCODING PYTHONUTF8 PYTHONNOUSERSITE PYTHONMALLOC PYTHONPYCACHEPREFIX PYTHONOPTIMIZE
        PYTHONSAFEPATH PYTHONTRACEMALLOC PYTHONDEVMODE PYTHONBREAKPOINT PYTHONVERBOSE PYTHONPROFILEIMPORTTIME
        PYTHONCOERCECLOCALE PYTHONINTMAXSTRDIGITS PYTHONNODEBUGRANGES PYTHONWARNDEFAULTENCODING""".split()),
}
# ... less the names that say they hold a secret (SECRET_NAME, and *_PASS-style ones: SECRET_ENV_NAME) and the
# values that carry a credential whatever their name (credential):
SECRET_ENV_NAME = re.compile(r"(^|_)(PASS|PASSWD|PASSWORD|PASSPHRASE|PW|PWD|TOKENS?|SECRETS?|KEYS?|APIKEY|AUTH|"
                             r"AUTHORIZATION|CREDS?|CREDENTIALS?|COOKIES?|SESSION|SIG|SIGNATURE|PRIVATE|JWT)(_|$)", re.I)
_URL_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s?#]*@")  # https://TOKEN@host, https://user:pw@host
_URL_QUERY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s?#]*\?[^\s#]*=")  # https://host/x?token=... (any parameter)
_AUTH_SCHEME = re.compile(r"(?i)\b(bearer|basic|digest|token|negotiate)\s+[A-Za-z0-9._~+/=-]{8,}")
_RUN = re.compile(r"[A-Za-z0-9+=_-]{20,}")  # a word a key or token is made of ('/' excluded: paths are not judged)


def clean_environment(env: Mapping[str, str], *, pass_env: Iterable[str] = ()) -> dict[str, str]:
    """What of ``env`` an isolated process inherits: the names the frameworks need (ENV_NAMES, ENV_PREFIXES; under
    HF_, TRANSFORMERS_, TOKENIZERS_ and PYTHON only those ENV_DOCUMENTED lists), less those that say they hold a
    secret (``HF_TOKEN``, ``SLURM_JWT``, ``NCCL_DB_PASS``) and the values that carry a credential (a URL's userinfo
    or query parameters, an ``Authorization`` scheme's token; under a name not listed, a high-entropy word too);
    plus the names the user lists (``pass_env``: the contract's ``workload.pass_env``), as they are. Nothing else."""
    listed = set(pass_env)
    return {k: v for k, v in env.items() if k in listed or _inherited(k, v)}


def _inherited(name: str, value: str) -> bool:
    if name in ENV_NAMES:
        return credential(value, judge_entropy=False) is None
    prefix = next((p for p in ENV_PREFIXES if name.startswith(p)), None)
    if prefix is None or SECRET_NAME.search(name) or SECRET_ENV_NAME.search(name):
        return False
    documented = ENV_DOCUMENTED.get(prefix)
    if documented is not None and name not in documented:
        return False
    return credential(value, judge_entropy=documented is None) is None


def credential(value: str, *, judge_entropy: bool) -> str | None:
    """Why ``value`` looks like it carries a credential (a few words), or None."""
    if _URL_USERINFO.search(value):
        return "a URL's userinfo"
    if _URL_QUERY.search(value):
        return "a URL's query parameters"
    if _AUTH_SCHEME.search(value):
        return "an Authorization scheme's token"
    if judge_entropy and not _paths(value):  # a folder named by a hash (a cache's) is a path, not a key
        for word in _RUN.findall(value):
            if _entropy_bits(word) >= 3.5 and any(c.isdigit() for c in word) and any(c.isalpha() for c in word):
                return "a high-entropy word"
    return None


def _paths(value: str) -> bool:
    """``value`` is one or more existing absolute paths (``:``-separated)."""
    items = value.split(os.pathsep)
    return all(i.startswith("/") and os.path.exists(i) for i in items)


def _entropy_bits(word: str) -> float:
    """Shannon entropy of ``word``'s characters, bits per character (a random base64 key: ~5; a word: ~3)."""
    n = len(word)
    return -sum(c / n * math.log2(c / n) for c in (word.count(ch) for ch in set(word)))
