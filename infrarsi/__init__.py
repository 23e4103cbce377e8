"""InfraRSI: make distributed LLM training faster without changing what it computes."""

__version__ = "0.1.0"
