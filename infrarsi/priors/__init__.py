"""Prior sources: the LLM (any OpenAI-compatible endpoint) and the offline knowledge base (a contract drafted
from a request asks the same LLM: stages/draft.py).

Public API::

    priors_for(space, *, workload, hardware, llm=None, record_dir=None) -> list[Prior]
    offline_priors(space, *, workload=None, hardware=None) -> list[Prior]
    LLMConfig(model=..., base_url=..., ...), LLMConfig.from_env()
    exchanges(run_dir) -> list[Exchange]          # every recorded LLM exchange, for the bank
"""

from .elicit import priors_for, reconcile
from .llm import Exchange, LLMConfig, exchanges
from .offline import offline_priors
from ..trial.prior import Prior

__all__ = ["Exchange", "LLMConfig", "Prior", "exchanges", "offline_priors", "priors_for", "reconcile"]
