"""The typed records of a run directory (pydantic): what each file holds, read and written only by RunDir.

The trial (``trial.record.Trial``), a verified candidate (``trial.verified.VerifiedCandidate``), why a setting was
proposed (``trial.proposal.Proposal``) and the noise profile (``doctor.noise.NoiseProfile``) are their packages' own models; the rest live here. Times are unix seconds unless a name says otherwise; trial ids are the
folder names under ``trials/``; a pair is ``(baseline trial id, candidate trial id)``, run back to back.

Where a record carries another component's own open structure (the models' fitted effects, a kernel verifier's
extra fields), it is kept as a mapping and that component reads it.
"""

from __future__ import annotations

from typing import Any

import math

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from ..trial.launch import Handle, LaunchSpec
from ..trial.prior import Prior
from ..trial.proposal import Proposal
from ..trial.verified import Pair, VerifiedCandidate
from .models import ModelsRecord


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------------------------------------- the lock
class LockRecord(BaseModel):
    """``contract.lock`` (contract/lock.py writes it): the normalized contract, its hash, every workload file's hash,
    their combined hash (what each sealed record is made under), and the lock's own seal (an HMAC)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    contract_path: str  # where the contract file was (checked by hash; a moved run keeps its seal)
    sha256: str  # of the normalized contract
    contract: dict[str, Any]  # the normalized contract (contract.model.Contract, dumped)
    files: dict[str, str] = {}  # workload file, relative to the contract's folder -> sha256
    files_relative_to: str = ""  # "contract" (contract/lock.py); "": an older lock, whose files are named as written
    workload_sha256: str | None = None
    locked_at: float = 0.0
    infrarsi_version: str = ""
    seal: str | None = None


# ---------------------------------------------------------------------------------------- stages.json
class StageDone(_Record):
    finished_at: float
    stop_reason: str | None = None  # search: why it stopped
    trials: int | None = None  # search: trials it ran
    budget: int | None = None  # search: its budget
    promoted: int | None = None  # verify: candidates promoted


class Reopened(_Record):
    at: float
    was: dict[str, StageDone] = {}


class Stages(_Record):
    """Which parts of the run stage finished, and what a resume must keep (the seed, a ``--more`` budget)."""

    search: StageDone | None = None
    verify: StageDone | None = None
    reopened: list[Reopened] = []
    search_budget: int | None = None
    search_seed: int | None = None
    slurm: dict[str, str] | None = None  # the sbatch flags given on the command line (execute/slurm_options.py)


# ------------------------------------------------------------------------------- verification records
class RerunPair(_Record):
    """An A/B pair whose measurement was set aside and run again, and why: a trial of it did not finish (the
    runner was restarted), or another job disturbed it. Every one is kept and shown by the report."""

    candidate: dict[str, Any]
    trials: list[int]  # the baseline's, then the candidate's (one id when the candidate's never started)
    reason: str
    at: float


class VerificationProgress(_Record):
    """``verification.progress.json``: per candidate (its setting's key), the pairs run so far; and the pairs run
    again. Written after every pair, so a killed verification resumes where it stopped."""

    pairs: dict[str, list[Pair]] = {}
    rerun: list[RerunPair] = []

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, data: Any) -> Any:
        """A progress file written before the rerun record was kept: {key: [[a, b], ...]}."""
        if isinstance(data, dict) and data and not {"pairs", "rerun"} & set(data):
            return {"pairs": data}
        return data

    def accounted(self) -> set[int]:
        """Every trial id the progress names (pairs and reruns)."""
        out = {i for ps in self.pairs.values() for p in ps for i in p}
        return out | {i for r in self.rerun for i in r.trials}


class Verification(_Record):
    """``verification.json``: the re-verification of the search's best settings against the baseline."""

    repeats: int
    mde: float
    baseline: dict[str, Any]
    candidates: list[VerifiedCandidate] = []
    rule: str = ""
    contract_sha256: str | None = None
    finished_at: float | None = None
    rerun: list[RerunPair] = []  # pairs set aside and run again (restarts), besides each candidate's disturbed ones

    def promoted(self) -> list[VerifiedCandidate]:
        return [c for c in self.candidates if c.promoted]


# ------------------------------------------------------------------------------------------ noise.json
TARGET_EFFECT = 0.02  # the change we want to be able to see: 2%


class LossBands(BaseModel):
    """``noise.json``'s ``numerics``: the loss referee's calibrated bands (contract/numerics.py: ``calibrate`` makes
    them, its ``Referee`` judges a trial with them). Series -> one value per step of the first ``window`` steps;
    tolerances and spreads are relative differences to the baseline's first run (an infinite one is written null)."""

    model_config = ConfigDict(frozen=True, extra="ignore")  # ignore: an unknown key was always passed over

    window: int
    reference: dict[str, list[float]]  # series ("loss", "grad_norm") -> the baseline's first run
    exact: dict[str, list[float]]  # series -> relative tolerance per step for exact knobs
    precision: dict[str, list[float]]  # series -> relative band per step for precision knobs
    repeat_spread: dict[str, list[float]]
    seed_spread: dict[str, list[float]]  # {} when no seed run was made
    precision_knobs: list[str]
    baseline: dict[str, Any]
    basis: str = ""  # one line: how the bands were made

    @field_validator("reference", "exact", "precision", "repeat_spread", "seed_spread", mode="before")
    @classmethod
    def _null_is_inf(cls, v: Any) -> Any:
        """JSON has no infinity: a relative difference past every band (a step a run did not log) reads back."""
        if isinstance(v, dict):
            return {k: [math.inf if x is None else x for x in xs] if isinstance(xs, list) else xs for k, xs in v.items()}
        return v


class NoiseProfile(BaseModel):
    """``noise.json``: the doctor's baseline runs and what their scatter allows (doctor/noise.py measures it). Times in seconds, effects as fractions (0.02 = 2%)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repeats: int
    step_times_s: list[float]  # one steady-state step time per baseline run
    trial_ids: list[int]
    median_step_s: float
    cv: float
    ci95: tuple[float, float]  # bootstrap 95% CI of the median step time
    mde: float  # minimum detectable relative effect with `repeats` runs per setting
    mde_by_repeats: dict[int, float]
    target_effect: float = TARGET_EFFECT
    repeats_for_target: int  # runs per setting to detect target_effect
    phases: dict[str, float] = {}  # phase -> median seconds per step
    loss_max_rel_diff: float = 0.0  # worst relative loss difference between runs (first compare_steps)
    loss_reproduces: bool = True
    reference_losses: list[float] = []  # the first run's loss trace: the baseline other trials are checked against
    baseline: dict[str, Any] = {}  # the baseline setting the runs used (knob -> value)
    numerics: LossBands | None = None  # the calibrated loss referee; None (written {}) before the doctor made one
    formula: str = "mde = (z_0.975 + z_0.80) * cv * sqrt(2 / repeats); repeats_for(d) = ceil(2 * (2.80 * cv / d)^2)"

    @field_validator("numerics", mode="before")
    @classmethod
    def _bands(cls, v: Any) -> Any:
        """``{}`` (a record from before the referee) is None; a referee (contract/numerics.py) is kept as its bands."""
        if isinstance(v, LossBands):
            return dict(v)
        return None if v == {} else v

    @field_serializer("numerics")
    def _empty_when_none(self, v: LossBands | None) -> LossBands | dict:
        return {} if v is None else v

    def summary_json(self) -> dict:
        """The object ``infrarsi doctor --json`` prints."""
        return {"cv": self.cv, "median_step_s": self.median_step_s, "ci95": list(self.ci95), "mde": self.mde,
                "repeats": self.repeats, "phases": self.phases}


# ------------------------------------------------------------------------------------------ search.json
class KernelVerdict(BaseModel):
    """A kernel candidate's verdict at run start (kernels/space.py); the verifier may add fields."""

    model_config = ConfigDict(extra="allow")

    op: str = ""
    verdict: str | None = None  # "pass" | "fail" | "disqualified"
    sha256: str | None = None
    reasons: list[str] = []
    origin: str = "contract"  # "contract" | "generated"
    why: str = ""  # generated: why its op was chosen


class SearchRecord(BaseModel):
    """``search.json``: why the search stopped, each trial's proposal, the priors and kernel verdicts it used,
    the bank runs it seeded from, and what the tuner's models fitted (``models``: search/record.py writes it)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    stop_reason: str = "not recorded"
    proposals: dict[str, Proposal] = {}  # trial id -> why the tuner proposed it
    tuner_overhead_s: list[float] = []  # seconds per ask (fits + scoring)
    kernel_verdicts: dict[str, KernelVerdict] = {}
    bank_sources: list[str] = []
    priors: list[Prior] = []  # the priors the search started from (trial/prior.py)
    models: ModelsRecord | None = None  # None: the search has not fitted anything

    @model_validator(mode="before")
    @classmethod
    def _schema_1(cls, data: Any) -> Any:
        """A run written before the ``models`` block (its fields flat here) still reads."""
        return ModelsRecord.lift(data) if isinstance(data, dict) else data

    def passed_generated(self) -> dict[str, KernelVerdict]:
        return {p: v for p, v in self.kernel_verdicts.items() if v.origin == "generated" and v.verdict == "pass"}


# ------------------------------------------------------------------------------------------- per trial
class LaunchRecord(_Record):
    """``trials/<n>/launch.json``: written with the token before the submit (a crash between the submit and the
    record can still be adopted by token), and again with the executor's handle after."""

    attempt: int = 0
    spec: LaunchSpec
    written_at: float
    token: str | None = None
    handle: Handle | None = None


class ClockRecord(BaseModel):
    """``trials/<n>/clock.json``: the harness's own clock of a trial's stdout (execute/clock.py)."""

    model_config = ConfigDict(extra="allow")

    wall_s: float
    started_unix: float | None = None
    complete: bool = True
    stdout_sha256: str
    arrivals_s: list[float] = []
    cpu_s: list[float | None] = []
    cpu_t_s: list[float | None] = []
    chunks: list[int] = []  # per stdout line, the number of the pipe read that completed it
    stderr: dict[str, Any] | None = None  # the same for stderr: sha256, arrivals_s, chunks, cpu_s, cpu_t_s
