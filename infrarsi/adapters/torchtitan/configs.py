"""What torchtitan ships, as tables: model flavors, the defaults of both config eras (0.2.x TOML job files,
0.3.x config functions), the config functions' own values, and which fields map to which catalog knobs."""

from __future__ import annotations

import re
from typing import Any

from .spelling import SPELLING

FRAMEWORK = "torchtitan"

# Model flavors: (model name, flavor) -> fixed workload arguments (Megatron names).
FLAVORS: dict[tuple[str, str], dict[str, Any]] = {
    ("llama3", "debugmodel"): dict(num_layers=6, hidden_size=256, num_attention_heads=16, num_query_groups=16, vocab_size=2048),
    ("llama3", "8B"): dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
                           ffn_hidden_size=14336, vocab_size=128256),
    ("llama3", "70B"): dict(num_layers=80, hidden_size=8192, num_attention_heads=64, num_query_groups=8,
                            ffn_hidden_size=28672, vocab_size=128256),
    ("llama3", "405B"): dict(num_layers=126, hidden_size=16384, num_attention_heads=128, num_query_groups=8,
                             ffn_hidden_size=53248, vocab_size=128256),
    ("deepseek_v3", "16B"): dict(num_layers=27, hidden_size=2048, num_attention_heads=16, num_query_groups=16,
                                 ffn_hidden_size=10944, moe_ffn_hidden_size=1408, num_experts=64, moe_router_topk=6,
                                 vocab_size=102400),
    ("deepseek_v3", "671B"): dict(num_layers=61, hidden_size=7168, num_attention_heads=128, num_query_groups=128,
                                  ffn_hidden_size=18432, moe_ffn_hidden_size=2048, num_experts=256, moe_router_topk=8,
                                  vocab_size=129280),
}

# 0.3.x: the Trainer.Config defaults every config function starts from ("section.field" -> value).
DEFAULTS_03: dict[str, Any] = {
    "training.local_batch_size": 8, "training.global_batch_size": -1, "training.seq_len": 2048,
    "training.steps": 10000, "training.enable_cpu_offload": False, "training.mixed_precision_param": "bfloat16",
    "parallelism.data_parallel_replicate_degree": 1, "parallelism.data_parallel_shard_degree": -1,
    "parallelism.fsdp_reshard_after_forward": "default", "parallelism.tensor_parallel_degree": 1,
    "parallelism.enable_sequence_parallel": True, "parallelism.pipeline_parallel_degree": 1,
    "parallelism.context_parallel_degree": 1, "parallelism.expert_parallel_degree": 1,
    "compile.enable": False, "compile.enable_async_tensor_parallel": False, "compile.components": ["model", "loss"],
    "activation_checkpoint.mode": "selective", "fp8": "none",
}
# 0.3.x config functions torchtitan ships: model flavor and the values they set.
CONFIGS_03: dict[str, dict[str, Any]] = {
    "llama3_debugmodel": {"model": ("llama3", "debugmodel"), "training.local_batch_size": 8, "training.seq_len": 2048,
                          "training.steps": 10},
    "llama3_8b": {"model": ("llama3", "8B"), "training.local_batch_size": 1, "training.seq_len": 8192,
                  "training.steps": 1000},
    "llama3_8b_mxfp8": {"model": ("llama3", "8B"), "training.local_batch_size": 1, "training.seq_len": 8192,
                        "training.steps": 1000, "compile.enable": True, "compile.components": ["model"],
                        "fp8": "mxfp8"},
    "llama3_70b": {"model": ("llama3", "70B"), "training.local_batch_size": 8, "training.seq_len": 8192,
                   "training.steps": 1000, "parallelism.tensor_parallel_degree": 8, "activation_checkpoint.mode": "full"},
    "llama3_405b": {"model": ("llama3", "405B"), "training.local_batch_size": 2, "training.seq_len": 8192,
                    "training.steps": 3000, "parallelism.tensor_parallel_degree": 8, "activation_checkpoint.mode": "full",
                    "compile.enable": True, "compile.enable_async_tensor_parallel": True, "fp8": "tensorwise"},
    "deepseek_v3_16b": {"model": ("deepseek_v3", "16B"), "training.local_batch_size": 4, "training.seq_len": 4096,
                        "training.steps": 1000, "parallelism.expert_parallel_degree": 8, "compile.enable": True,
                        "compile.components": ["loss"]},
}
# 0.2.x ([job] TOML) defaults for the fields the adapter reads.
DEFAULTS_02: dict[str, Any] = {
    "model.name": "llama3", "model.flavor": "debugmodel", "model.converters": [],
    "training.local_batch_size": 8, "training.global_batch_size": -1, "training.seq_len": 2048,
    "training.steps": 10000, "training.enable_cpu_offload": False, "training.mixed_precision_param": "bfloat16",
    "parallelism.data_parallel_replicate_degree": 1, "parallelism.data_parallel_shard_degree": -1,
    "parallelism.fsdp_reshard_after_forward": "default", "parallelism.tensor_parallel_degree": 1,
    "parallelism.enable_async_tensor_parallel": False, "parallelism.pipeline_parallel_degree": 1,
    "parallelism.context_parallel_degree": 1, "parallelism.expert_parallel_degree": 1,
    "compile.enable": False, "compile.components": ["model", "loss"], "activation_checkpoint.mode": "selective",
}

# Field -> knob, by kind, for the knobs read and written as plain values: their fields are the spelling's
# (spelling.py, the one table); 0.2.x's own name for async TP is the one field of its own.
_INT_FIELDS = {SPELLING.flags[n]: n for n in ("tensor_parallel", "pipeline_parallel", "context_parallel",
                                              "expert_parallel", "micro_batch_size")}
_BOOL_FIELDS_02 = {**{SPELLING.flags[n]: n for n in ("cpu_offload", "torch_compile")},
                   "parallelism.enable_async_tensor_parallel": "async_tp"}
_BOOL_FIELDS_03 = {SPELLING.flags[n]: n for n in ("cpu_offload", "torch_compile", "async_tp", "sequence_parallel")}
_FP8_CONVERTERS = {"float8": "tensorwise", "quantize.linear.float8": "tensorwise", "quantize.linear.mx": "mxfp8",
                   "mx": "mxfp8"}
SUBCOMMAND = r"activation[-_]checkpoint:"  # 0.3's activation-checkpoint choice, the last argument
_SUBCOMMAND = re.compile(rf"^{SUBCOMMAND}([a-z_-]+)$")
_AC_MODES = {"none": "none", "selective": "selective", "full": "full"}
