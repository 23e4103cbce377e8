"""The doctor as the verify tests need it, with real toy trials: the baseline run 3 times, its noise profile, and a
Tuner told those runs (what the run stage hands ``reverify``)."""

from __future__ import annotations

from infrarsi.doctor.noise import profile
from infrarsi.search import Outcome, Tuner
from infrarsi.trial import TrialStatus


def measured_baseline(runner, space, contract, base):
    """(the 3 doctor trials, their noise profile, a Tuner told them) for the baseline setting ``base``."""
    doctor = [runner.submit(base, role="doctor").result() for _ in range(3)]
    assert all(t.status is TrialStatus.OK for t in doctor), [t.reason for t in doctor]
    noise = profile([t.metrics.step_time_s for t in doctor], trial_ids=[t.id for t in doctor])
    tuner = Tuner(space, memory_capacity_bytes=contract.hardware.memory_capacity_bytes, noise_cv=noise.cv)
    for t in doctor:
        tuner.tell(base, Outcome(status="ok", step_time_s=t.metrics.step_time_s))
    return doctor, noise, tuner
