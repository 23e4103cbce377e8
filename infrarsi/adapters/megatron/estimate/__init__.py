"""The pre-flight estimate for Megatron-LM (the adapter's ``estimate_module``: :mod:`.peak`): megatron-core's own
model and training step on fake tensors, in a process of its own (:mod:`.step`, with the two dispatch modes of
:mod:`.fake`), what a CPU rank holds beyond its tensors (:mod:`.overhead`), and Megatron-LM's theoretical memory
formula to compare with (:mod:`.formula`). Nothing here imports torch or megatron-core when imported."""
