"""What `infrarsi init` checks before it locks a contract: that what the contract names exists.

- ``workload.launch`` (relative to the contract): a file, not a directory, not empty, UTF-8 text. An
  empty job file would otherwise read as the framework's defaults: another task.
- ``workload.entrypoint``: its program is installed (``python`` is this interpreter; ``torchrun`` may
  sit beside it), its ``-m module`` imports, its script exists, and it is what the adapter launches
  (an entrypoint the adapter does not run would be ignored without a word).
- the baseline's launch, as the adapter builds it: it builds, and its program is installed; the adapter's reader
  judges its flags (a Megatron program's parser, from the tree the launch runs: adapters/megatron/flags.py), and
  what it could only warn about is returned to be shown.

Each problem is one line naming the contract file, the key and the fix (a ``ContractError``).
"""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path

from ..adapters import adapter_class
from ..contract.model import Contract, ContractError, Workload
from ..contract.place import launch_cwd, launch_path, launch_places
from ..execute.local import resolve_argv, resolve_program


def check_files(contract: Contract, contract_path: Path) -> None:
    """The launch file and the entrypoint exist (before anything reads them)."""
    base = Path(contract_path).resolve().parent
    w = contract.workload
    if w.launch:
        _check_launch_file(Path(contract_path), base, w)
    if w.entrypoint:
        _check_entrypoint(Path(contract_path), base, w.entrypoint)
    if w.cwd and not launch_cwd(w, base).is_dir():
        raise ContractError(f"{contract_path}: workload.cwd {w.cwd!r} is not a folder (looked at {launch_cwd(w, base)}); "
                            "name the folder the launch runs from, relative to the contract")


def check_launch(contract: Contract, contract_path: Path) -> list[str]:
    """The baseline's launch builds, runs an installed program, and is what the entrypoint names. Returns the
    reader's warnings about the launch (e.g. flags it had no parser to check against: adapters/megatron/flags.py),
    one line each; a launch the reader refuses raises."""
    base = Path(contract_path).resolve().parent
    w = contract.workload
    argv, warnings = _baseline_argv(contract, Path(contract_path))
    if argv is None:
        return warnings
    where = f"workload.launch {w.launch}" if w.launch else "workload.entrypoint" if w.entrypoint else "the adapter"
    prog = argv[0]
    if resolve_program(prog, base) is None:
        raise ContractError(f"{contract_path}: {where} runs `{prog}`, which is not installed here (not on PATH, not "
                            f"beside {resolve_argv(['python'])[0]}); install it"
                            f"{' (it comes with torch)' if Path(prog).name == 'torchrun' else ''} or fix the command")
    if w.entrypoint and adapter_class(w.adapter).runs_own_program:
        target = _target(shlex.split(w.entrypoint))
        if target is not None and target not in argv:
            raise ContractError(f"{contract_path}: workload.entrypoint names {target!r}, but the {w.adapter} adapter "
                                f"launches `{shlex.join(argv[:3])}`; remove entrypoint or set it to that command")
    return warnings


def _check_launch_file(contract_path: Path, base: Path, workload: Workload) -> None:
    places = launch_places(workload, base)
    p = launch_path(workload, base)
    key = f"{contract_path}: workload.launch {workload.launch}"
    if p.is_dir():
        raise ContractError(f"{key} is a directory; name the launch script or job file inside it")
    if not p.is_file():
        raise ContractError(f"{key} does not exist (looked at {', '.join(map(str, places))})")
    data = p.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ContractError(f"{key} is not a text file (byte 0x{data[e.start]:02x} at offset {e.start}); "
                            f"name the launch script or job file") from None
    if not text.strip():
        raise ContractError(f"{key} is empty; it must hold the job (a launch script or the framework's TOML), "
                            f"not the framework's defaults")


def _check_entrypoint(contract_path: Path, base: Path, entrypoint: str) -> None:
    try:
        argv = shlex.split(entrypoint)
    except ValueError as e:
        raise ContractError(f"{contract_path}: workload.entrypoint {entrypoint!r} is not a shell command ({e})") from None
    if not argv:
        return
    key = f"{contract_path}: workload.entrypoint {entrypoint!r}"
    if resolve_program(argv[0], base) is None:
        raise ContractError(f"{key}: `{argv[0]}` is not installed here (not on PATH); install it or fix the command")
    if not _is_python(argv[0]):
        return
    rest = argv[1:]
    if len(rest) >= 2 and rest[0] == "-m":
        mod = rest[1]
        try:
            found = importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):  # a parent package that does not exist
            found = False
        if not found:
            raise ContractError(f"{key}: no module {mod!r} in {resolve_argv(['python'])[0]}; install it or fix the "
                                f"module name")
        return
    script = next((a for a in rest if not a.startswith("-")), None)
    if script and script.endswith(".py") and not any((d / script).is_file() for d in (base, Path.cwd())):
        raise ContractError(f"{key}: script {script} does not exist (looked in {base} and {Path.cwd()})")


def _target(argv: list[str]) -> str | None:
    """The module or script an entrypoint runs (what must appear in the adapter's launch)."""
    if not argv or not _is_python(argv[0]):
        return None
    rest = argv[1:]
    if len(rest) >= 2 and rest[0] == "-m":
        return rest[1]
    return next((a for a in rest if not a.startswith("-")), None)


def _is_python(prog: str) -> bool:
    return Path(prog).name.startswith("python")


def _baseline_argv(contract: Contract, contract_path: Path) -> tuple[list[str] | None, list[str]]:
    """The baseline's command as the adapter builds it (None when the adapter needs what is not here yet), and the
    warnings of the adapter's reading of the launch."""
    from ..adapters import contract_adapter

    adapter = contract_adapter(contract.workload.adapter, contract_path)  # launch files relative to the contract
    try:
        space = adapter.knob_space(contract)
        baseline = space.complete(contract.baseline).to_dict()
        spec = adapter.trial_form(contract, adapter.launch(contract, baseline), baseline)  # what a trial runs
    except ContractError as e:
        raise ContractError(f"{contract_path}: {e}") from None
    except (ValueError, TypeError, OSError) as e:
        raise ContractError(f"{contract_path}: the baseline does not launch: {' '.join(str(e).split())[:300]}") from None
    return (resolve_argv(list(spec.argv)) if spec.argv else None), adapter.launch_warnings(contract)
