"""The run stage's use of the experience bank: which past runs seed a new run (a measured run never seeds from
simulated ones unless asked), and what a finished run leaves in the bank (its trials, the time effects it learned,
its LLM exchanges). The bank is advice: a broken bank never stops a run, it is said and the run goes on."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Console
from rich.markup import escape

from ..contract import contract_hash
from ..contract.model import Contract
from ..knobs import KnobSpace, Setting
from ..trial import Trial

if TYPE_CHECKING:
    from ..models import MemoryModel, TimeModel


class Learner(Protocol):
    """What the bank reads of a finished search (``search.Tuner`` is one): its models, refit on every trial told."""

    space: KnobSpace
    memory_estimate: Any  # the memory model's offset (None: none); its memory coefficients are then residuals

    def fit_models(self) -> None: ...

    @property
    def time_model(self) -> TimeModel | None: ...

    @property
    def memory_model(self) -> MemoryModel | None: ...


def run_id(contract: Contract, run_dir: Path) -> str:
    """This run's id in the experience bank: contract name, hash and run directory."""
    return f"{contract.name}:{contract_hash(contract)[:12]}:{Path(run_dir).resolve()}"


def bank_seed(space: KnobSpace, contract: Contract, run_dir: Path, base_priors: list, err: Console, *, evidence: str,
              from_simulated: bool = False) -> tuple[list[Setting], list, list]:
    """Initial settings from the most similar past runs, and the offline/LLM priors merged with their posteriors.
    ``evidence``: this run's kind of trials, "measured" or "simulated" (the adapter says). A measured run never
    seeds from simulated runs unless ``from_simulated`` (and then it says so)."""
    from ..bank import Bank, bank_path, seed_from_bank

    try:
        with Bank(bank_path(None)) as bank:
            skip = [run_id(contract, run_dir)]  # not its own past
            sim = [r.run_id for r in bank.runs() if r.evidence == "simulated"]
            if evidence == "measured" and sim:
                if from_simulated:
                    err.print(f"[yellow]seeding from simulated runs too, as asked ({len(sim)} in the bank): their "
                              f"trials are what-if estimates, not measurements[/]")
                else:
                    skip += sim
                    err.print(f"{len(sim)} simulated run(s) in the bank not used to seed this measured run "
                              f"(--seed-from-simulated to use them)")
            seed = seed_from_bank(bank, space, hardware=contract.hardware.model_dump(), workload=workload_sig(contract),
                                  base_priors=base_priors, exclude_runs=skip)
        return list(seed.initial), seed.merged_with(base_priors), list(seed.sources)
    except Exception as e:  # experience is advice: a broken bank never stops a run
        err.print(f"[yellow]experience bank unavailable ({type(e).__name__}: {escape(str(e))}); starting unseeded[/]")
        return [], base_priors, []


def workload_sig(contract: Contract) -> dict[str, Any]:
    return {"framework": contract.workload.adapter, **contract.workload.args}


def bank_record(run_dir: Path, contract: Contract, finished: list[Trial], tuner: Learner, err: Console, *,
                evidence: str) -> None:
    """Keep the run in the experience bank: every finished trial (``finished``, as the run record has them), the
    time effects the search learned, its LLM exchanges."""
    from ..bank import Bank, bank_path, priors_from_effects
    from ..priors import exchanges

    hw, wl = contract.hardware.model_dump(), workload_sig(contract)
    rid = run_id(contract, run_dir)
    try:
        with Bank(bank_path(None)) as bank:
            bank.add_trials(rid, finished, hardware=hw, workload=wl, evidence=evidence)
            for ex in exchanges(run_dir):
                bank.add_llm_exchange(rid, ex.model_dump(mode="json"))
            tuner.fit_models()
            # With the analytical memory offset, memory coefficients are residuals, not effects: only time travels.
            mem = [] if tuner.memory_model is None or tuner.memory_estimate is not None or not tuner.memory_model.n_obs \
                else tuner.memory_model.effects()
            posts = priors_from_effects(tuner.time_model.effects(), mem, space=tuner.space) if tuner.time_model.n_obs else []
            peaks = sorted(t.metrics.peak_memory_bytes for t in finished
                           if t.role == "doctor" and t.metrics.peak_memory_bytes)
            if posts:  # memory effects travel in bytes, relative to this baseline's peak
                bank.add_posteriors(rid, posts, hardware=hw, workload=wl,
                                    reference_peak_bytes=peaks[len(peaks) // 2] if peaks else None)
    except Exception as e:  # the run is recorded on disk whatever happens to the bank
        err.print(f"[yellow]could not write the experience bank ({type(e).__name__}: {escape(str(e))}); the run itself is recorded[/]")
