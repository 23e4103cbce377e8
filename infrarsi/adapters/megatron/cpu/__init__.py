"""megatron-core's GPT training as the project runs it on the CPU: the reader of a ``pretrain_gpt.py`` command line
into megatron-core's objects (:mod:`.model`, which the estimate's fake step builds too), the two layers its local
spec lacks without Transformer Engine (:mod:`.layers`), the training loop ``launchers/pretrain_gpt_cpu.py`` runs
(:mod:`.gpt`), the shims that let megatron-core's GPU code path run on the CPU (:mod:`.shims`) and how a CPU
trial is started (:mod:`.trial`). Nothing here is imported with the adapter: each module imports megatron-core
(or torch) where it is used."""
