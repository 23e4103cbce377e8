"""How the step-time model (estimate/step_model.py) prices a Megatron job: the README table its constants were
fitted on, the band that table gives, the knobs it reads beyond the simulated clusters' and the model flags it
cannot price."""

from __future__ import annotations

from ..spec import StepPricing

# Megatron-LM README "Training Speed and Scalability" (images/model_table.png): H100, seq 4096, vocab 131072, MHA,
# GeLU 4h MLP, tied embeddings; the runs overlap DP and TP communication. The cost model's constants were fitted on
# it (tests/workloads/test_simulated.py::test_calibration_megatron_readme).
# (size, layers, hidden, heads, TP, PP, GPUs, global batch, published TFLOP/s per GPU)
README_TABLE = (
    ("1.7B", 24, 2048, 16, 1, 1, 48, 192, 408.8),
    ("7.1B", 30, 4096, 32, 2, 1, 96, 192, 465.9),
    ("16B", 32, 6144, 48, 4, 1, 192, 192, 489.1),
    ("70B", 84, 8192, 64, 8, 2, 768, 384, 419.7),
)
README_SOURCE = "Megatron-LM README, Training Speed and Scalability table (H100)"

# measured / predicted step time over README_TABLE's rows (recomputed by scripts/bench_cost_model.py; in-sample)
PRICING = StepPricing(
    dp_sharding="per_iteration", regime="calibrated", interval=(0.945, 1.065),
    source=f"the model's error on the {README_SOURCE} (4 rows, in-sample): measured/predicted 0.945-1.065",
    reads=("recompute_method", "recompute_num_layers", "expert_tensor_parallel"),
    unread_as="as at Megatron's defaults",
    # model flags that change the work in a way the cost model does not price
    refuses={"multi_latent_attention": "--multi-latent-attention: multi-latent attention (the model prices GQA/MHA "
                                       "attention only)",
             "moe_layer_freq": "--moe-layer-freq: a mix of dense and MoE layers (the model prices every layer as MoE)"})
