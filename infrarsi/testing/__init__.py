"""Helpers for tests and benchmarks, never imported by the product: a loopback OpenAI-compatible server
(``openai_server``), a Slurm cluster on localhost (``slurm``), a run recorded from a real minigpt
workload (``recorded_run``) and a synthetic ground truth for the time and memory models (``synthetic``)."""
