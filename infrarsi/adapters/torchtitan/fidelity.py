"""torchtitan's fidelity count (:mod:`infrarsi.adapters.fidelity`): round trips read back by its ``ConfigManager``
and ``ParallelDims`` (:mod:`.equivalence`; 0.2.x in-process, 0.3.x from its target directory); a refused setting put
to the same config code (:mod:`.check`), its pipeline split (``generate_llm_fqn_per_model_part``) and the arithmetic
its mesh, Trainer and tensor-parallel plan apply only on a GPU node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...knobs import Setting
from ..fidelity import Counts, moved


def pipeline_refusal(p, s: Mapping[str, Any]) -> list[str]:
    """torchtitan's own pipeline split for this layout (0.2.x's function; 0.3 splits the same way)."""
    pp = int(s.get("pipeline_parallel", 1))
    L = p.fixed.get("num_layers")
    if pp <= 1 or not L:
        return []
    try:
        from torchtitan.distributed.pipeline_parallel import generate_llm_fqn_per_model_part
    except ImportError:
        return []
    schedule = str(p.values.get("parallelism.pipeline_parallel_schedule")
                   or ("Interleaved1F1B" if p.style == "cli" else "1F1B"))
    per_rank = 2 if schedule.startswith(("Interleaved", "Looped", "ZBV", "DualPipe")) else 1
    try:
        generate_llm_fqn_per_model_part(pp * per_rank, L, 1, 1)
    except ValueError as e:
        return [f"torchtitan pipeline split: {e}"]
    return []


def _mesh_refusal(s: Mapping[str, Any]) -> list[str]:
    """torchtitan's build_mesh arithmetic (it runs only with a process group): the expert mesh's efsdp =
    dp_shard * cp * tp / (etp * ep) must be whole (etp = 1)."""
    ep, dp, rep = s.get("expert_parallel", 1), s.get("data_parallel"), s.get("data_parallel_replicate", 1)
    if ep > 1 and dp and dp % rep == 0 and ((dp // rep) * s.get("context_parallel", 1) * s.get("tensor_parallel", 1)) % ep:
        return ["torchtitan build_mesh: efsdp = dp_shard * cp * tp / ep is not whole"]
    return []


def _batch_refusal(p, s: Mapping[str, Any]) -> list[str]:
    """torchtitan's Trainer (train.py): the global batch is a multiple of local batch x data-parallel degree
    (the emitted launch keeps the user's global batch)."""
    gbs, dp, mbs = p.fixed.get("global_batch_size"), s.get("data_parallel"), s.get("micro_batch_size", 1)
    if gbs and dp and gbs % (mbs * dp):
        return [f"torchtitan Trainer: global batch size must be multiple of local batch size times data-parallel "
                f"degree ({gbs} % ({mbs} * {dp}) != 0)"]
    return []


def _heads_refusal(p, s: Mapping[str, Any]) -> list[str]:
    """torchtitan's tensor-parallel plan shards attention by heads (wq/wk/wv colwise): each TP rank holds
    n_heads / tp query and n_kv_heads / tp key/value heads, so TP divides both (it fails when the model is
    parallelized, on the GPU node)."""
    tp = s.get("tensor_parallel", 1)
    bad = [f"{what} {n}" for what, n in (("heads", p.fixed.get("num_attention_heads")),
                                          ("kv heads", p.fixed.get("num_query_groups"))) if n and n % tp]
    return [f"torchtitan tensor parallel {tp}: does not divide {', '.join(bad)}"] if bad else []


def counts(p, settings: list[Mapping[str, Any]], refused: list[Mapping[str, Any]], *, world: int | None,
           why: Mapping[Setting, str] | None = None) -> Counts:
    """``p``: the parsed launch (``TorchtitanLaunch``); ``world``: the ranks it runs on (its job file does not say)."""
    from ..equivalence import changed_knobs, differences
    from .check import check_torchtitan, check_torchtitan03_many, torchtitan03_args
    from .emit import emit_torchtitan
    from .equivalence import OUTPUTS, original_argv, owners, readings
    from .launch import TorchtitanLaunchError

    c = Counts()
    specs = [emit_torchtitan(p, s, world_size=world) for s in settings]
    got = readings(p, [(original_argv(p), p.env)] + [(sp.argv, sp.env) for sp in specs], world)
    before, after = got[0], got[1:]
    for s, a in zip(settings, after):
        d = differences(before, a, changed=changed_knobs(p.setting, s), owners=owners(), outputs=OUTPUTS) \
            if before and a else []
        c.round_trips += 1
        c.equal += not d
        if d:
            c.examples.append(f"round trip {moved(p.setting, s)}: {d[0]}")
    jobs, which = [], []
    for s in refused:
        c.sampled_refused += 1
        words = pipeline_refusal(p, s) + _mesh_refusal(s) + _batch_refusal(p, s) + _heads_refusal(p, s)
        if world and s.get("data_parallel") is None:
            words.append("world not divisible")
        if words:
            continue
        try:
            spec = emit_torchtitan(p, s, world_size=world)
        except TorchtitanLaunchError:
            continue  # no launch can state it (a shard degree below 1): torchtitan has nothing to accept
        if p.style == "cli":
            jobs.append((torchtitan03_args(p, spec.argv, spec.env) or [], world))
            which.append(s)
        elif not check_torchtitan(p, spec.argv, env=spec.env, world_size=world):
            c.false_invalid += 1
            c.examples.append(f"false-invalid {moved(p.setting, s)}: the space says {(why or {}).get(s, '?')}")
    if jobs:
        res = check_torchtitan03_many(jobs) or [["0.3 not installed"]] * len(jobs)
        for s, r in zip(which, res):
            if not r:
                c.false_invalid += 1
                c.examples.append(f"false-invalid {moved(p.setting, s)}: the space says {(why or {}).get(s, '?')}")
    return c
