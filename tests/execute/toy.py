"""ToyAdapter: a real adapter for toy_workload.py (a real process), for executor and runner tests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infrarsi.adapters.base import Adapter, ParsedRun
from infrarsi.adapters.megatron.log import classify_failure, parse_log, to_metrics
from infrarsi.contract.model import Contract
from infrarsi.trial import LaunchSpec
from infrarsi.trial import TrialStatus
from infrarsi.knobs import Knob, KnobSpace

TOY = str(Path(__file__).with_name("toy_workload.py"))
MODES = ("ok", "drift", "hang", "garbage", "alloc", "signal", "exit", "gloo", "paced", "progress", "slowclock", "stderr", "buffered", "noisy", "titan", "fill", "gpumem", "linger")


def toy_contract(*, cap_gib: float = 0.25, timeout_s: float = 30, name: str = "toy",
                 baseline: dict[str, Any] | None = None, warmup_steps: int = 1, measured_steps: int = 2,
                 startup_allowance_s: float = 0.0) -> Contract:
    return Contract.model_validate({
        "baseline": baseline or {},
        "name": name,
        "workload": {"adapter": "minigpt", "args": {"train_iters": 4}},
        "hardware": {"memory_capacity_gib": cap_gib},
        "invariants": {"timing": {"warmup_steps": warmup_steps, "measured_steps": measured_steps,
                                              "timeout_s": timeout_s, "startup_allowance_s": startup_allowance_s},
                       "loss": {"compare_steps": 3, "rtol": 0.02}},
        # the toy's 20 ms steps vary by tens of percent on a loaded machine: no speedup to confirm, no early stop
        "budget": {"doctor_repeats": 2, "confirm_speedup": 100.0},
    })


class ToyAdapter(Adapter):
    name = "toy"

    def knob_space(self, contract: Contract) -> KnobSpace:
        return KnobSpace([
            Knob(name="mode", kind="categorical", domain=MODES, default="ok"),
            Knob(name="step_ms", kind="int", domain=(20, 100, 500, 2000), default=20),
            Knob(name="alloc_mb", kind="int", domain=(0, 64, 300, 600), default=0),
            Knob(name="processes", kind="int", domain=(1, 2), default=1),
            Knob(name="signal", kind="int", domain=(9, 11, 15), default=9),
            Knob(name="linger_s", kind="int", domain=(30, 3), default=30),
        ])

    def launch(self, contract: Contract, setting: Mapping[str, Any]) -> LaunchSpec:
        s = dict(setting)
        argv = ["python", TOY, "--mode", s.get("mode", "ok"), "--steps", "4", "--step-ms", str(s.get("step_ms", 20)),
                "--alloc-mb", str(s.get("alloc_mb", 0)), "--signal", str(s.get("signal", 9)),
                "--linger-s", str(s.get("linger_s", 30))]
        n = int(s.get("processes", 1))
        return LaunchSpec(argv=argv, processes=n, devices=n, time_limit_s=contract.invariants.timing.timeout_s,
                          memory_cap_bytes=contract.hardware.memory_capacity_bytes)

    def parse(self, contract: Contract, stdout: str, stderr: str, returncode: int | None) -> ParsedRun:
        t = contract.invariants.timing
        m = to_metrics(parse_log(stdout), warmup_steps=t.warmup_steps, measured_steps=t.measured_steps)
        failure = classify_failure(stderr + "\n" + stdout)
        if failure is not None:
            status, reason, ev = failure
            return ParsedRun(status=status, metrics=m.model_copy(update={"step_time_s": None}), evidence=ev, reason=reason)
        if returncode == 0 and m.step_time_s is not None:
            return ParsedRun(status=TrialStatus.OK, metrics=m)
        tail = (stderr or stdout).strip().splitlines()[-3:]
        return ParsedRun(status=TrialStatus.CRASH, metrics=m.model_copy(update={"step_time_s": None}), evidence=tail,
                         reason="no measured iteration lines" if returncode == 0 else f"exit code {returncode}")
