"""The framework's own word on a setting, before anything is launched.

A setting the knob space calls valid can still be one the framework refuses; a refusal on the cluster
costs an allocation. So every trial's launch is first put to the framework's own config code, where it
is installed, and a refused setting becomes an ``invalid`` trial carrying the framework's message, with
no launch (the runner records a ``ValueError`` from ``Adapter.launch`` that way; the tuner is told like
any other failed trial).

- Megatron-LM: megatron-core's ``TransformerConfig`` (the model config Megatron builds from the
  arguments) and the process-group arithmetic of ``parallel_state.initialize_model_parallel``, done
  with megatron-core's own ``RankGenerator`` for the dense and the expert grids.
- torchtitan 0.2.x: ``ConfigManager.parse_args`` on the emitted command line (the real parser: job
  file, field names, value types), then ``ParallelDims`` (its degree checks) and the model-converter
  registry. Checks torchtitan makes only on a GPU node (float8 recipe with the fp8 all-gather, async TP
  without a compiled model) are stated here in torchtitan's words.
- torchtitan 0.3.x: the same package name as 0.2.x, so 0.3 sits in a target directory of its own
  (``$INFRARSI_TORCHTITAN03``, default ``<venv>/torchtitan-0.3``) and its ``ConfigManager`` and
  ``ParallelDims`` run in a subprocess (:mod:`._torchtitan03`), a batch of command lines at a time.

A framework that is not installed checks nothing (``available`` says which are).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..transformer import data_parallel


class FrameworkRejected(ValueError):
    """The framework's config code refused the setting; the message is the framework's own."""


def available(framework: str) -> bool:
    """Whether ``framework``'s config code is importable here (megatron-core; torchtitan 0.2.x)."""
    try:
        if framework == "megatron":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import megatron.core.parallel_state  # noqa: F401
                import megatron.core.transformer.transformer_config  # noqa: F401
        elif framework == "torchtitan":
            from torchtitan.config import ConfigManager  # noqa: F401
        else:
            return False
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------- Megatron
def _has_transformer_engine() -> bool:
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        return False
    return True


def megatron_core_check(fixed: Mapping[str, Any], setting: Mapping[str, Any]) -> list[str]:
    """Build megatron-core's TransformerConfig for this model and setting; its error, if any.

    Returns [] when megatron-core accepts it, one message otherwise, or a note when megatron-core
    is not installed (pip install 'infrarsi[megatron]')."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core.transformer.enums import AttnBackend
            from megatron.core.transformer.transformer_config import TransformerConfig
    except ImportError:
        return ["megatron-core is not installed, so its checks were skipped; pip install 'infrarsi[megatron]'"]
    need = ("num_layers", "hidden_size", "num_attention_heads")
    if not all(fixed.get(k) for k in need):
        return []
    import torch

    s = setting
    gran = s.get("recompute_granularity", "none")
    # Megatron's arguments set params_dtype (and the pipeline's p2p dtype) from --bf16/--fp16
    dtype = torch.bfloat16 if s.get("bf16") else (torch.float16 if fixed.get("fp16") else torch.float32)
    kw: dict[str, Any] = dict(
        num_layers=fixed["num_layers"], hidden_size=fixed["hidden_size"],
        num_attention_heads=fixed["num_attention_heads"],
        num_query_groups=fixed.get("num_query_groups"),
        ffn_hidden_size=fixed.get("ffn_hidden_size"), kv_channels=fixed.get("kv_channels"),
        tensor_model_parallel_size=s.get("tensor_parallel", 1),
        pipeline_model_parallel_size=s.get("pipeline_parallel", 1),
        virtual_pipeline_model_parallel_size=(s.get("virtual_pipeline", 1) if s.get("virtual_pipeline", 1) > 1 else None),
        context_parallel_size=s.get("context_parallel", 1),
        expert_model_parallel_size=s.get("expert_parallel", 1),
        sequence_parallel=bool(s.get("sequence_parallel")),
        recompute_granularity=None if gran == "none" else gran,
        recompute_method=s.get("recompute_method") if gran == "full" else None,
        recompute_num_layers=s.get("recompute_num_layers") if gran == "full" else None,
        bf16=bool(s.get("bf16")), fp16=bool(fixed.get("fp16")), params_dtype=dtype, pipeline_dtype=dtype,
        fp8="hybrid" if s.get("fp8_recipe", "none") != "none" else None,
        fp8_recipe=s.get("fp8_recipe") if s.get("fp8_recipe", "none") != "none" else "delayed",
        tp_comm_overlap=bool(s.get("tp_comm_overlap")),
        add_bias_linear=not fixed.get("disable_bias_linear"), gated_linear_unit=bool(fixed.get("swiglu")),
        attention_backend=AttnBackend[s.get("attention_backend", "auto")],
    )
    if fixed.get("num_experts"):
        kw.update(num_moe_experts=fixed["num_experts"], moe_router_topk=fixed.get("moe_router_topk", 2),
                  moe_token_dispatcher_type=s.get("moe_token_dispatcher", "allgather"),
                  moe_grouped_gemm=bool(s.get("moe_grouped_gemm")))
        if fixed.get("moe_ffn_hidden_size"):
            kw["moe_ffn_hidden_size"] = fixed["moe_ffn_hidden_size"]
    if kw["fp8"] is not None and not _has_transformer_engine():
        # megatron-core's fp8 checks ask Transformer Engine's version; without TE they cannot run (TypeError on
        # None), so fp8 is left to the catalog's device rule and the rest of the config is still checked
        kw["fp8"] = None
    kw = {k: v for k, v in kw.items() if v is not None or k in ("recompute_granularity", "recompute_method", "fp8")}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            TransformerConfig(**kw)
    except (ValueError, AssertionError, TypeError) as e:
        return [f"megatron-core TransformerConfig: {e}"]
    return []


def megatron_parallel_check(setting: Mapping[str, Any], *, world_size: int | None,
                            expert_tensor_parallel: int | None = None) -> list[str]:
    """The rank arithmetic of ``initialize_model_parallel`` for this setting, with megatron-core's own
    ``RankGenerator`` (dense grid tp-cp-dp-pp, expert grid etp-ep-edp-pp; their pipeline groups must agree)."""
    try:
        from megatron.core.parallel_state import RankGenerator
    except ImportError:
        return []
    if not world_size:
        return []
    s = setting
    tp, pp, cp, ep = (int(s.get(k, 1)) for k in ("tensor_parallel", "pipeline_parallel", "context_parallel",
                                                  "expert_parallel"))
    vp = int(s.get("virtual_pipeline", 1))
    dp = data_parallel(world_size, tp, pp, cp)
    if dp is None:
        return [f"megatron-core parallel_state: world_size ({world_size}) is not divisible by {tp * pp * cp}"]
    if vp > 1 and pp <= 1:
        return ["megatron-core parallel_state: pipeline-model-parallel size should be greater than 1 with "
                "interleaved schedule"]
    etp = expert_tensor_parallel if expert_tensor_parallel is not None else tp
    etmp = etp * ep * pp
    if world_size % etmp:
        return [f"megatron-core parallel_state: world_size ({world_size}) is not divisible by "
                f"expert_tensor_model_pipeline_parallel size ({etmp})"]
    order = "tp-cp-ep-dp-pp"
    try:
        dense = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order, rank_offset=0)
        expert = RankGenerator(tp=etp, ep=ep, dp=world_size // etmp, pp=pp, cp=1, order=order, rank_offset=0)
        if dense.get_ranks("pp") != expert.get_ranks("pp"):
            return ["megatron-core parallel_state: Pipeline parallel groups are expected to be the same for "
                    "Non-Expert and Expert part"]
    except (AssertionError, RuntimeError, ValueError) as e:
        return [f"megatron-core parallel_state: {e}"]
    return []


def check_megatron(parsed, setting: Mapping[str, Any]) -> list[str]:
    """megatron-core's refusals of ``setting`` for this launch ([] when it accepts, or is not installed)."""
    if not available("megatron"):
        return []
    out = megatron_core_check(parsed.fixed, setting)
    out += megatron_parallel_check(setting, world_size=parsed.world_size,
                                   expert_tensor_parallel=parsed.expert_tensor_parallel)
    return out


# --------------------------------------------------------------------------- torchtitan
_BOX = re.compile(r"[\u2500-\u257f]+|-{3,}")


def _tyro_message(text: str) -> str:
    """tyro's boxed error as one line (the box drawing and the help hint dropped)."""
    lines = [_BOX.sub("", ln).strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("For full helptext")]
    return " ".join(lines) or "the command line was refused"


def torchtitan_config(args: list[str]):
    """torchtitan's ``ConfigManager().parse_args(args)`` (the JobConfig), or FrameworkRejected with its message."""
    from torchtitan.config import ConfigManager

    out, err = io.StringIO(), io.StringIO()
    log = logging.getLogger("torchtitan")  # it warns about missing HF assets: not the check's business
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ConfigManager().parse_args(list(args))
    except SystemExit:
        raise FrameworkRejected(f"torchtitan ConfigManager: {_tyro_message(err.getvalue() + out.getvalue())}") from None
    except (AssertionError, ValueError, TypeError, KeyError, FileNotFoundError) as e:
        raise FrameworkRejected(f"torchtitan ConfigManager: {type(e).__name__}: {e}") from None
    finally:
        log.setLevel(level)


def torchtitan_job_checks(cfg, *, world_size: int | None) -> list[str]:
    """torchtitan's checks of a parsed JobConfig that do not need a GPU to state: ParallelDims (its own
    code), the converter registry, and two checks it makes while building the model on the GPU node."""
    out: list[str] = []
    p = cfg.parallelism
    if world_size:
        from torchtitan.distributed import ParallelDims

        try:
            ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                         cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                         ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree, world_size=world_size)
        except (AssertionError, ValueError) as e:
            out.append(f"torchtitan ParallelDims: {e}")
    import torchtitan.components.quantization  # noqa: F401  (registers the float8 and mx converters)
    from torchtitan.protocols import model_converter

    known = getattr(model_converter, "_registry_model_converter_cls", None)
    for name in cfg.model.converters:
        if known is not None and name not in known:  # build_model_converters looks each name up
            out.append(f"torchtitan model converters: KeyError: {name!r} (model.converters = {cfg.model.converters})")
    f8 = cfg.quantize.linear.float8
    if any("float8" in c for c in cfg.model.converters if "grouped_mm" not in c) and f8.recipe_name is not None \
            and f8.enable_fsdp_float8_all_gather:
        out.append("torchtitan Float8LinearConverter: using `float8_config.enable_fsdp_float8_all_gather` together "
                   "with `float8_config.recipe_name` is not supported")
    if p.enable_async_tensor_parallel and p.tensor_parallel_degree > 1 and not (
            cfg.compile.enable and "model" in cfg.compile.components):
        out.append("torchtitan: Async TP requires 'model' in --compile.components and --compile.enable")
    return out


def torchtitan_args(parsed, argv: list[str], env: Mapping[str, str] | None = None) -> list[str] | None:
    """The arguments torchtitan's train.py would get from this emitted launch (the job file first, its path
    made absolute), or None when the launch is a 0.3 command line (another parser) or names no job file."""
    if parsed.style != "toml":
        return None
    args = list(argv)
    if "torchtitan.train" in args:
        args = args[args.index("torchtitan.train") + 1:]
    elif parsed.launch is not None and parsed.launch.program:
        args = args[len(parsed.launch.launcher) + len(parsed.launch.program):]
    job: str | None = None
    keep: list[str] = []
    k = 0
    while k < len(args):  # the job file once, absolute, first (ConfigManager reads the first one)
        a = args[k]
        if a in ("--job.config_file", "--job.config-file"):
            job = job or (args[k + 1] if k + 1 < len(args) else None)
            k += 2
            continue
        if a.startswith(("--job.config_file=", "--job.config-file=")):
            job = job or a.split("=", 1)[1]
            k += 1
            continue
        keep.append(a)
        k += 1
    job = job or (env or {}).get("CONFIG_FILE") or parsed.toml_path
    if not job:
        return None
    p = Path(job)
    if not p.is_absolute() and parsed.base_dir and (Path(parsed.base_dir) / p).is_file():
        p = Path(parsed.base_dir) / p  # a script's relative path: from the folder it is read in
    return ["--job.config_file", str(p.resolve()), *keep]


TORCHTITAN03_ENV = "INFRARSI_TORCHTITAN03"


def torchtitan03_dir() -> Path | None:
    """The target directory that holds torchtitan 0.3 (``pip install --target DIR torchtitan==0.3.0 ...``), if any."""
    d = Path(os.environ.get(TORCHTITAN03_ENV) or Path(sys.prefix) / "torchtitan-0.3")
    return d if (d / "torchtitan" / "config" / "manager.py").is_file() else None


def torchtitan03_args(parsed, argv: list[str], env: Mapping[str, str] | None = None) -> list[str] | None:
    """What 0.3's train.py would get from this emitted launch (run_train.sh's MODULE/CONFIG made flags)."""
    if parsed.style != "cli":
        return None
    args = list(argv)
    if "torchtitan.train" in args:
        return args[args.index("torchtitan.train") + 1:]
    if parsed.launch is not None and parsed.launch.program:
        args = args[len(parsed.launch.launcher) + len(parsed.launch.program):]
        e = dict(env or {})
        if "--module" not in args and (e.get("MODULE") or e.get("CONFIG")):
            args = ["--module", e.get("MODULE", "llama3"), "--config", e.get("CONFIG", "llama3_debugmodel"), *args]
        return args
    return None


def check_torchtitan03_many(jobs: list[tuple[list[str], int | None]], *, timeout_s: float = 600) -> list[list[str]] | None:
    """torchtitan 0.3's refusals for each (args, world size), in one subprocess; None when 0.3 is not installed."""
    target = torchtitan03_dir()
    if target is None:
        return None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-m", "infrarsi.adapters._torchtitan03"], input=json.dumps(jobs),
                          capture_output=True, text=True, env=env, timeout=timeout_s, cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the torchtitan 0.3 check did not run ({tail}); reinstall it into {target}")
    return json.loads(proc.stdout)


def check_torchtitan(parsed, argv: list[str], *, env: Mapping[str, str] | None = None,
                     world_size: int | None) -> list[str]:
    """torchtitan's refusals of this emitted launch ([] when it accepts, is not installed, or is a 0.3 launch)."""
    if parsed.style == "cli":
        args03 = torchtitan03_args(parsed, argv, env)
        got = check_torchtitan03_many([(args03, world_size)]) if args03 is not None else None
        return got[0] if got else []
    if not available("torchtitan"):
        return []
    args = torchtitan_args(parsed, argv, env)
    if args is None:
        return []
    try:  # settings that differ only in the environment (NCCL knobs) give the same command: parsed once
        key = (tuple(args), world_size, Path(args[1]).read_bytes())
    except OSError:
        key = None
    if key is not None and key in _TT_CACHE:
        return list(_TT_CACHE[key])
    try:
        cfg = torchtitan_config(args)
        out = torchtitan_job_checks(cfg, world_size=world_size)
    except FrameworkRejected as e:
        out = [str(e)]
    if key is not None:
        if len(_TT_CACHE) > 4096:
            _TT_CACHE.clear()
        _TT_CACHE[key] = tuple(out)
    return out


_TT_CACHE: dict[tuple, tuple[str, ...]] = {}
