"""Workload: one contract bound to its folder and its adapter, built once per stage.

Every stage that needs the user's launch asks it here: where the launch file is and the folder it runs from
(``contract/place.py``'s one rule), the launch as the framework reads it, its knob space, the complete setting of a
trial (the one merge: the launch's own values, then the contract's baseline, then the setting), the launch of a
setting, an edited launch file read back, and what ``infrarsi knobs`` shows. The framework's own code stays in
``adapters/<framework>/``: what a launch file is, per framework, is asked of a :class:`LaunchFileAdapter`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..contract.model import Contract, ContractError
from ..contract.place import launch_cwd, launch_path
from ..trial import LaunchSpec
from ..knobs import KnobSpace
from .base import Adapter, LaunchFileAdapter, full_setting
from .registry import launch_file_frameworks


class Workload:
    """``contract`` with ``folder`` (the contract's folder, which ``workload.launch`` and ``workload.cwd`` are
    relative to; None: the working directory) and its ``adapter`` (default: the registry's, bound to ``folder``)."""

    def __init__(self, contract: Contract, folder: str | Path | None, adapter: Adapter | None = None) -> None:
        from . import get_adapter

        self.contract = contract
        self.folder = Path(folder).resolve() if folder is not None else None
        self.adapter = adapter if adapter is not None else get_adapter(contract.workload.adapter, base_dir=self.folder)

    @classmethod
    def of_file(cls, contract_path: str | Path) -> "Workload":
        """The workload of the contract in ``contract_path`` (its folder is where its paths start)."""
        from ..contract.model import load_contract
        from .registry import SPECS

        return cls(load_contract(contract_path, adapters=SPECS), Path(contract_path).resolve().parent)

    # ------------------------------------------------------------------ where
    @property
    def path(self) -> Path | None:
        """The launch file (``workload.launch``), None when the workload names none."""
        return launch_path(self.contract.workload, self.folder) if self.contract.workload.launch else None

    @property
    def cwd(self) -> Path:
        """The folder the launch runs from (``workload.cwd``; default: the contract's repository root)."""
        return launch_cwd(self.contract.workload, self.folder)

    @property
    def reads_launch_file(self) -> bool:
        """Whether the adapter reads the user's own launch file (Megatron, torchtitan) and the contract names one."""
        return isinstance(self.adapter, LaunchFileAdapter) and bool(self.contract.workload.launch)

    def _launch_file_adapter(self) -> LaunchFileAdapter:
        if not self.reads_launch_file:
            raise ContractError(f"workload.adapter {self.contract.workload.adapter!r} with workload.launch "
                                f"{self.contract.workload.launch!r}: no launch file to read; name a "
                                f"{launch_file_frameworks()} launch in workload.launch")
        assert isinstance(self.adapter, LaunchFileAdapter)
        return self.adapter

    # ------------------------------------------------------------------ what
    def parsed(self) -> Any:
        """The user's launch as the framework reads it."""
        return self._launch_file_adapter().parsed(self.contract)

    def knob_space(self) -> KnobSpace:
        return self.adapter.knob_space(self.contract)

    def full_setting(self, setting: Mapping[str, Any]) -> dict[str, Any]:
        """The launch's own values, then the contract's baseline, then ``setting`` (later wins): every knob a
        trial of ``setting`` runs with, the ones the space leaves out included."""
        if self.reads_launch_file:
            return self._launch_file_adapter().full_setting(self.contract, setting)
        return full_setting({}, self.contract, setting)

    def launch(self, setting: Mapping[str, Any]) -> LaunchSpec:
        return self.adapter.launch(self.contract, setting)

    def reread(self, text: str, files: Mapping[str, str] | None = None) -> Any:
        """``text`` read as the launch file is read (what ``apply`` would write, read back; ``files``: the scripts
        it runs, path -> text, as edited)."""
        return self._launch_file_adapter().reread(self.contract, text, files)

    def differences(self, setting: Mapping[str, Any], text: str, files: Mapping[str, str] | None = None) -> list[str]:
        """What differs between the user's launch and the launch file ``text`` (and the scripts it runs,
        ``files``) that the tuned ``setting`` does not explain; [] when the workload has no launch file."""
        if not self.reads_launch_file:
            return []
        # the space completes the contract's baseline and the setting with its defaults; the launch's own values
        # stand for the knobs outside the space
        complete = self.knob_space().complete({**self.contract.baseline, **dict(setting)})
        return self._launch_file_adapter().differences(self.contract, {**self.parsed().setting, **complete}, text,
                                                       files)

    @classmethod
    def of_run(cls, contract: Contract, run_dir: str | Path) -> "Workload":
        """The workload of a locked run: bound to the locked contract's folder (``run_adapter``'s)."""
        from . import run_adapter

        adapter = run_adapter(contract.workload.adapter, run_dir)
        return cls(contract, adapter.base_dir, adapter)

    def model_shape(self) -> dict[str, Any]:
        """The model's shape from the launch, in the names the analytical memory estimate reads ({} when the
        launch does not state it in those names)."""
        return self.adapter.model_shape(self.contract) if self.reads_launch_file else {}

    def describe(self, *, core: bool = True) -> dict[str, Any]:
        """What ``infrarsi knobs`` shows: framework, fixed, setting, violations, world_size, space, notes, parsed
        (``core=False``: the catalog's rules only, not the framework's own config code)."""
        return self._launch_file_adapter().describe(self.contract, core=core)
