"""Generate a Triton kernel candidate for an op with an LLM, then verify it.

    path, result = generate_kernel("rmsnorm", llm=LLMConfig.from_env())
    result.verdict   # "pass" | "fail" -- the verifier's word, never the LLM's

The prompt carries the op's reference source (``kernels/<op>/reference.py``), its ``forward``
signature, its shape families, dtypes and tolerances, and the verifier's rules. The answer
(``{"name", "source", "notes"}``, strict schema) must parse, define ``forward`` with the reference's
parameters and pass the verifier's static checks, else it is asked again once with the errors (the
LLM layer's rule). The file is written to ``kernels/<op>/generated/<name>.py`` and handed to the
verifier; a failed verification is fed back once (its reasons verbatim) for a second candidate.

Generated files live one folder below the hand-written candidates (``list_candidates`` does not see
them). The run stage writes them into the repository's ``kernels/<op>/generated/``, which its contract's
``scope.files`` must take (kernels/space.py refuses generation otherwise), and adds those that pass to
that op's knob domain for its run only; outside a run a generated file is a candidate once someone lists
it (``scope.knobs.kernel_<op>``). With no LLM configured this raises :class:`KernelGenerationError`
(there is no offline kernel author).
"""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..priors import llm as llm_mod
from ..priors.llm import LLMConfig
from .static import static_check

log = logging.getLogger("infrarsi.kernels")

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")


class KernelGenerationError(RuntimeError):
    """No candidate could be produced (no endpoint, or answers that failed validation twice)."""


class KernelAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str  # file stem: lowercase letters, digits, underscores (e.g. "triton_rows8")
    source: str  # the whole Python file
    notes: str  # the design in one or two sentences


def _reference_facts(ref_source: str) -> dict[str, str]:
    """forward's parameter list and the reference's FAMILIES/DTYPES/TOLERANCES, as source text."""
    tree = ast.parse(ref_source)
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "forward":
            out["signature"] = f"def forward({ast.unparse(node.args)})"
            out["params"] = ",".join(a.arg for a in node.args.args + node.args.kwonlyargs)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("FAMILIES", "DTYPES", "TOLERANCES"):
                out[node.targets[0].id] = ast.get_source_segment(ref_source, node) or ""
    return out


def _rules() -> str:
    """The verifier's rules in its own words: the static allowlist and the dynamic checks."""
    from . import dynamic, static

    doc = dynamic.__doc__ or ""
    return ((static.__doc__ or "").strip() + "\n\nAllowed builtins: " + ", ".join(sorted(static.ALLOWED_BUILTINS))
            + "\nAllowed torch names on the host: torch." + ", torch.".join(sorted(static.TORCH_ATTRS))
            + "\n\n" + doc[doc.find("What a candidate must survive"):].strip())


def _prompt(op: str, ref_source: str, facts: dict[str, str], example: str | None) -> list[dict[str, Any]]:
    system = (
        "You write Triton kernels for PyTorch training. A candidate is ONE self-contained Python file defining "
        "`forward(...)` with exactly the reference's signature, computing the same function (outputs and gradients) "
        "with @triton.jit kernels in both the forward and the backward, wrapped in its own torch.autograd.Function. "
        "No torch math on the host (allocation, views and dtype casts are fine), no fallbacks to the reference, no "
        "try/except around kernels, no caching of results, no mutation of inputs. It must work under the CPU "
        "Triton interpreter (TRITON_INTERPRET=1) and on a GPU."
    )
    parts = [
        f"Op: {op}",
        f"Reference (kernels/{op}/reference.py):\n```python\n{ref_source}\n```",
        f"Signature to keep: {facts.get('signature', '(see forward above)')}",
        f"Shape families the verifier tests: {facts.get('FAMILIES', '(see reference)')}",
        f"Dtypes and tolerances: {facts.get('DTYPES', '')}  {facts.get('TOLERANCES', '')}",
    ]
    rules = _rules()
    if rules:
        parts.append(f"The verifier rejects a candidate for any of these:\n{rules}")
    if example:
        parts.append(f"An existing candidate that passes, for the conventions (write a different design):\n```python\n{example}\n```")
    parts.append('Answer with JSON: {"name": file stem, "source": the whole file, "notes": the design}.')
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def _checker(facts: dict[str, str]):
    want = facts.get("params", "")

    def check(ans: KernelAnswer) -> list[str]:
        problems = []
        if not _NAME.match(ans.name) or ans.name == "reference":
            problems.append(f"name {ans.name!r}: use lowercase letters, digits and underscores, e.g. 'triton_rows8'")
        try:
            tree = ast.parse(ans.source)
        except SyntaxError as e:
            return problems + [f"source does not parse: {e.msg} (line {e.lineno})"]
        fwd = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "forward"]
        if not fwd:
            problems.append("source defines no top-level forward(...); define it with the reference's signature")
        else:
            got = ",".join(a.arg for a in fwd[0].args.args + fwd[0].args.kwonlyargs)
            if want and got != want:
                problems.append(f"forward({got}) differs from the reference's forward({want}); keep the signature")
        if not problems:
            problems += static_check(ans.source)
        return problems

    return check


def _unique(folder: Path, name: str, source: str) -> Path:
    path = folder / f"{name}.py"
    k = 2
    while path.exists() and path.read_text() != source:
        path = folder / f"{name}_{k}.py"
        k += 1
    return path


def generate_kernel(op: str, *, llm: LLMConfig | None, out_dir: Path | None = None,
                    record_dir: Path | None = None, verify_settings: Any = None) -> tuple[Path, Any]:
    """Ask the LLM for a candidate of ``op``, write it, verify it; one repair round on a failed verification.

    Returns ``(path, VerifyResult)`` of the last candidate written (check ``result.verdict``).
    ``out_dir`` defaults to ``kernels/<op>/generated`` under the verifier's root (``$INFRARSI_KERNELS``
    or the repository's ``kernels/``); ``record_dir`` is the run directory
    (exchanges go to ``record_dir/llm/``); ``verify_settings``: a ``verify.VerifySettings`` (default: the
    verifier's own). Raises KernelGenerationError when no candidate can be had.
    """
    from .loader import GENERATED, OPS, kernels_root as default_root, list_candidates, reference_path
    from .verify import verify

    cfg = llm_mod.resolve(llm)
    if cfg is None:
        raise KernelGenerationError(
            f"generating a {op} kernel needs an LLM: set OPENAI_API_KEY, or OPENAI_BASE_URL + INFRARSI_LLM_MODEL")
    if op not in OPS:
        raise KernelGenerationError(f"unknown op {op!r}; kernel ops: {', '.join(OPS)}")
    root = default_root()
    ref = reference_path(op, root)
    if not ref.is_file():
        raise KernelGenerationError(f"{ref}: no reference for op {op!r}; a kernel op needs kernels/{op}/reference.py")
    ref_source = ref.read_text()
    facts = _reference_facts(ref_source)
    existing = list_candidates(op, root)
    example = existing[0].path.read_text() if existing else None
    folder = Path(out_dir) if out_dir is not None else ref.parent / GENERATED
    folder.mkdir(parents=True, exist_ok=True)
    messages = _prompt(op, ref_source, facts, example)
    path: Path | None = None
    result: Any = None
    for attempt in (1, 2):
        ans = llm_mod.ask(cfg, stage=f"kernel:{op}", messages=messages, schema=KernelAnswer,
                          check=_checker(facts), record_dir=record_dir)
        if not ans.ok:
            if path is not None:  # the repair round failed validation: the first candidate stands
                log.warning("kernel %s: the repair answer was unusable (%s); keeping %s", op, ans.error, path)
                return path, result
            raise KernelGenerationError(f"kernel {op}: no usable answer from {cfg.model}: {ans.error}")
        path = _unique(folder, ans.value.name, ans.value.source)
        path.write_text(ans.value.source)
        result = verify(path, op=op) if verify_settings is None else verify(path, op=op, settings=verify_settings)
        log.info("kernel %s: %s -> %s", op, path, result.verdict)
        if result.verdict == "pass" or attempt == 2:
            return path, result
        messages = [
            *messages,
            {"role": "assistant", "content": ans.value.model_dump_json()},
            {"role": "user", "content": "The verifier rejected this candidate:\n- " + "\n- ".join(result.reasons[:20])
             + "\nFix every reason and answer again with the whole file."},
        ]
    return path, result  # not reached: the loop returns on attempt 2
