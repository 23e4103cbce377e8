"""The kernel knobs of one run: verified at the contract's own model shape, pinned, extended by generation.

    space, verdicts, adapter = prepare(space, contract, run_dir, adapter, phases, err)

1. With an LLM configured, candidates are generated for the hottest ops among the kernel knobs in scope
   (hot_ops: the doctor's phase profile when it names ops, else each op's share of the memory traffic of
   one step, from the contract's model dims). Each is written inside the contract's scope, to the
   repository's ``kernels/<op>/generated/`` (named relative to the repository, like the contract's own
   candidates), and verified; those that pass join that op's knob domain for this run. A contract whose
   ``scope.files`` does not take that folder gets no generated candidates (one line says which glob to add).
2. Every candidate in a kernel knob's domain is verified (all of verify.py, plus a family drawn from the
   contract's model: its hidden size, MLP width, heads and vocabulary), inside the trials' isolation (no run
   directory, key, cache or bank visible; nothing writable); failures leave the domain. Where the machine has
   no isolation, the repository is watched and the run's seals are checked around each verification.
3. The verdicts are recorded in the run's verdict file (RunDir.verdicts_path) and the adapter is wrapped so that
   every launch names that file: the workload refuses bytes that are not the ones that passed.

A knob value is a candidate, ``PATH`` or ``PATH@VARIANT`` (loader.py): each variant of a file is verified, recorded
and pinned on its own; a value whose variant its file does not declare (the file edited since ``init`` checked
it) fails verification with that line, and the run goes on without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from ..transformer import minigpt_ffn
from . import verdicts as verdicts_mod
from .loader import OPS, generated_folder
from .ops import OPERATORS

if TYPE_CHECKING:
    from ..contract.model import Contract
    from ..execute.runner import TrialAdapter
    from ..knobs import KnobSpace

GENERATE_TOP = 2  # ops to generate candidates for, hottest first


def model_dims(contract: Contract) -> tuple[tuple[str, int], ...] | None:
    """The model's widths from the contract's workload args (Megatron's names), or None when absent."""
    a = dict(contract.workload.args)
    try:
        h = int(a["hidden_size"])
        heads = int(a.get("num_attention_heads", max(1, h // 128)))
        vocab = int(a.get("vocab_size", a.get("padded_vocab_size", 32000)))
        seq = int(a.get("seq_length", 2048))
        ffn = int(a.get("ffn_hidden_size") or minigpt_ffn(h))
    except (KeyError, TypeError, ValueError):
        return None
    return (("hidden", h), ("ffn_hidden", ffn), ("heads", heads), ("vocab", vocab), ("seq", seq))


def traffic_shares(dims: tuple[tuple[str, int], ...], ops: list[str], layers: int = 1) -> dict[str, float]:
    """Each op's share of one step's memory traffic (elements read + written, forward and backward), per token, by
    each op's own formula (ops.OPERATORS)."""
    d = dict(dims)
    per = {o: OPERATORS[o].traffic(d, layers) for o in ops}
    total = sum(per.values()) or 1
    return {o: per[o] / total for o in ops}


def hot_ops(ops: list[str], phases: dict[str, float], dims, *, layers: int = 1) -> list[tuple[str, float, str]]:
    """(op, share, how it was measured), hottest first."""
    named = {o: sum(s for p, s in phases.items() if o in p.replace("-", "_")) for o in ops}
    if any(v > 0 for v in named.values()):
        total = sum(named.values())
        return sorted(((o, v / total, "phase profile") for o, v in named.items()), key=lambda t: -t[1])
    if dims is None:
        return [(o, 1.0 / len(ops), "no model dims: equal shares") for o in ops]
    shares = traffic_shares(dims, ops, layers)
    return sorted(((o, shares[o], "share of memory traffic (model dims)") for o in ops), key=lambda t: -t[1])


def _kernel_knobs(space) -> list:
    return [k for k in space.knobs if k.name.startswith("kernel_") and k.name.removeprefix("kernel_") in OPS
            and len(k.domain) > 0]


def generate_for_run(space: KnobSpace, contract: Contract, run_dir: Path, phases: dict[str, float], err, *, llm=None,
                     top: int = GENERATE_TOP, settings=None) -> dict[str, dict[str, Any]]:
    """Ask the LLM for candidates of the hottest ops in scope; path -> record (op, verdict, reasons, ...)."""
    from ..priors.llm import LLMConfig
    from .generate import KernelGenerationError, generate_kernel
    from .verify import VerifySettings

    cfg = llm if llm is not None else LLMConfig.from_env()
    knobs = _kernel_knobs(space)
    if cfg is None or not knobs:
        return {}
    dims = model_dims(contract)
    layers = int(dict(contract.workload.args).get("num_layers", 1))
    ranked = hot_ops([k.name.removeprefix("kernel_") for k in knobs], phases, dims, layers=layers)
    root = _repository()
    out: dict[str, dict[str, Any]] = {}
    for op, share, how in ranked[:top]:
        refused = generated_scope_problem(op, contract.scope.files)
        if refused is not None:
            err.print(f"[yellow]{escape(refused)}[/]")
            continue
        try:
            path, result = generate_kernel(op, llm=cfg, out_dir=root / generated_folder(op), record_dir=run_dir,
                                           verify_settings=settings or VerifySettings(model=dims))
        except KernelGenerationError as e:
            err.print(f"[yellow]kernel {op}: no generated candidate ({escape(str(e))})[/]")
            continue
        out[_name(path, root)] = {"op": op, "verdict": result.verdict, "reasons": list(result.reasons),
                                  "sha256": result.sha256, "origin": "generated",
                                  "why": f"{op} is {share:.0%} of the step ({how})"}
        err.print(f"kernel {op}: generated {escape(_name(path, root))}: {result.verdict}"
                  + ("" if result.passed else f" ({escape('; '.join(result.reasons)[:160])})"))
    return out


def generated_scope_problem(op: str, globs) -> str | None:
    """Why the run may not write generated candidates of op (its folder is outside scope.files), or None.
    The file name comes from the LLM; a glob that takes the folder's files takes it (names: [a-z0-9_]+.py)."""
    from ..contract.scope import glob_of

    folder = generated_folder(op)
    if glob_of(f"{folder}/{op}_candidate.py", list(globs)) is not None:
        return None
    return (f"kernel {op}: not generated: scope.files {list(globs)} does not take {folder}/*.py, where generated "
            f"candidates are written; add \"kernels/**/*.py\" to [scope] files to let the run generate them")


def _repository() -> Path:
    from ..contract.scope import repository_root

    return repository_root()


def _name(path: Path, root: Path) -> str:
    """A generated file as a knob value: relative to the repository when the run works from its root (as
    the contract's own candidates are named), else absolute."""
    path = Path(path).resolve()
    if root == Path.cwd().resolve():
        return path.relative_to(root).as_posix()
    return str(path)


def prepare(space: KnobSpace, contract: Contract, run_dir: Path, adapter: TrialAdapter, phases: dict[str, float], err,
            *, llm=None, settings=None):
    """(space with only passing candidates, verdicts by candidate value, adapter pinned to them). ``settings``: the
    verifier's (default: all of it, plus the contract's model family)."""
    from .verify import VerifySettings

    knobs = _kernel_knobs(space)
    if not knobs:
        return space, {}, adapter
    settings = settings or VerifySettings(model=model_dims(contract))
    # Isolated verification cannot write the repository (execute/isolation.py); without isolation the repository is
    # watched around it, and the run's seals are checked after it (unisolated_watch).
    gen_guard = _guard(run_dir, *(_repository() / generated_folder(k.name.removeprefix("kernel_")) for k in knobs)) \
        if isolation_problem() is not None else None
    before = gen_guard.snapshot() if gen_guard is not None else {}
    generated = generate_for_run(space, contract, run_dir, phases, err, llm=llm, settings=settings)
    wrote = _changes(gen_guard, before, run_dir)  # generated candidates ran inside generate_kernel's verification
    for g in generated.values():
        if wrote:
            g.update(verdict="fail", reasons=[*g["reasons"], *_sandbox_reasons(wrote)])
    verdicts: dict[str, dict[str, Any]] = {}
    domains = {}
    for k in knobs:
        op = k.name.removeprefix("kernel_")
        values = list(k.domain) + [p for p, g in generated.items() if g["op"] == op and g["verdict"] == "pass"]
        keep = []
        for v in values:
            if v == "reference":
                keep.append(v)
                continue
            if v in generated and generated[v]["verdict"] != "pass":
                continue
            res, wrote = verify_watched(v, op, settings, run_dir)
            reasons = list(res.reasons) + _sandbox_reasons(wrote)
            verdicts[v] = {**generated.get(v, {"origin": "contract"}), "op": op,
                           "verdict": "fail" if wrote else res.verdict, "reasons": reasons, "sha256": res.sha256,
                           "isolated": res.isolated}
            if verdicts[v]["verdict"] == "pass":
                keep.append(v)
            else:
                err.print(f"[yellow]kernel {escape(str(v))} failed verification, never launched:[/] "
                          f"{escape('; '.join(reasons)[:200])}")
        domains[k.name] = keep
    for p, g in generated.items():  # the generated ones that failed: listed with their reasons
        verdicts.setdefault(p, g)
    f = verdicts_mod.record(run_dir, verdicts)
    return extended_space(space, domains), verdicts, verdicts_mod.pinned(adapter, f)


def isolation_problem() -> str | None:
    from .verify import isolation_problem as why

    return why()


def verify_watched(path, op: str, settings, run_dir: Path | None):
    """(verify()'s result, writes it made outside ``run_dir``). Isolated: nothing to watch (it can write nothing).
    Unisolated: the repository is compared around it (the stage's own open files aside), and the run's seals are
    checked after it (SealError when a record changed: the candidate could read the key)."""
    from .loader import CandidateError, sha256_of
    from .verify import VerifyResult, verify

    guard = _guard(run_dir) if isolation_problem() is not None else None
    before = guard.snapshot() if guard is not None else {}
    try:
        res = verify(path, op=op, settings=settings) if settings is not None else verify(path, op=op)
    except CandidateError as e:  # PATH@VARIANT that its file does not (any longer) declare: nothing ran
        res = VerifyResult(verdict="fail", reasons=[f"error: {e}"], cases=[], sha256=sha256_of(path), op=op,
                           path=str(path))
    return res, _changes(guard, before, run_dir)


def _changes(guard, before, run_dir: Path | None) -> list[str]:
    if guard is None:
        return []
    from ..rundir import chain
    from ..contract.scope import open_for_writing

    wrote = guard.changes(before, ignore=open_for_writing(guard.root))
    broken = chain.settled_problems(run_dir) if run_dir is not None else []
    if broken:
        raise chain.SealError(f"tampered records in {run_dir} after an unisolated kernel verification: {broken[0]}")
    return wrote


def _guard(run_dir: Path | None, *also: Path):
    """Watches the repository for writes outside the run directory (and ``also``: where generation writes)."""
    from ..contract.scope import TreeGuard

    return TreeGuard(_repository(), allowed=[p for p in (run_dir, *also) if p is not None])


def _sandbox_reasons(wrote: list) -> list[str]:
    return [f"scope: wrote outside its sandbox while verified: {w}" for w in wrote[:5]]


def extended_space(space, domains: dict[str, list]):
    """space with each kernel knob's domain replaced (grown by generated candidates, shrunk by failures)."""
    from ..knobs import KnobSpace

    knobs = [k.with_domain(domains[k.name], default=k.default if k.default in domains[k.name] else None)
             if k.name in domains and domains[k.name] else k for k in space.knobs]
    return KnobSpace(knobs, space.constraints)


def after_trial(run_dir: Path, trial, err, kernel_verdicts: dict | None = None) -> None:
    """A trial that caught a candidate drifting in situ disqualifies it for the rest of the run (in the
    run's verdict file, and in ``kernel_verdicts``, which the run stage saves in its search record)."""
    for path in verdicts_mod.after_trial(run_dir, trial):
        for p, v in (kernel_verdicts or {}).items():
            if verdicts_mod.same_candidate(p, path):
                v.update(verdict="disqualified", reasons=[*v.get("reasons", []),
                                                          f"numerics_drift in trial {trial.id} (in-situ spot check)"])
        err.print(f"[yellow]kernel {escape(str(path))} drifted from the reference inside trial {trial.id}: disqualified for "
                  "this run[/]")
