"""Prior: what a source believes one knob value does, on the log scale, relative to the knob's default.

``time_mean = -0.1`` means "about 10% faster" (exp(-0.1) = 0.905); ``mem_mean = +0.3`` means
"about 35% more peak memory". ``sd`` values are the belief's uncertainty on the same log scale.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Z90 = 1.6448536269514722  # Phi^-1(0.95): a central 90% interval of a normal belief is mean +- Z90 * sd


class Prior(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    knob: str
    value: Any  # the non-default value whose effect this states
    time_mean: float = 0.0  # effect on log step time
    time_sd: float = Field(0.5, gt=0)
    mem_mean: float = 0.0  # effect on log peak memory
    mem_sd: float = Field(0.5, gt=0)
    source: str = "uninformative"  # llm | offline | bank | uninformative
    rationale: str = ""

    @property
    def feature(self) -> str:
        """The KnobSpace feature column this prior is about: ``"knob=value"``."""
        return f"{self.knob}={self.value}"
