"""The runnable workloads the project ships: ``minigpt`` (a real decoder-only transformer, trained on the
CPU or a GPU, speaking Megatron's flags and log lines) and ``simulated`` (an analytical GPU cluster that
prints Megatron log lines; a setting past a GPU's memory fails with a CUDA out-of-memory traceback).
minigpt's FLOP count is ``infrarsi.transformer``'s; the simulator's parameter and FLOP counts are checked
equal to it (tests/test_transformer.py)."""
