"""Megatron-LM's command line read into megatron-core's objects (infrarsi/adapters/megatron/cpu/model.py): the
defaults and derivations Megatron-LM applies, and megatron-core's own refusals. No process group is needed."""

import pytest

from infrarsi.adapters.megatron.cpu.model import MegatronArgsError, padded_vocab, parse, transformer_config

BASE = ["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "8", "--seq-length", "128",
        "--global-batch-size", "8"]


def test_megatron_defaults_and_derivations():
    a = parse(BASE + ["--vocab-size", "1000", "--swiglu", "--recompute-activations",
                      "--tensor-model-parallel-size", "2"], strict=True).args
    assert a.ffn_hidden_size == int((4 * 256 * 2 / 3) / 64) * 64 == 640  # SwiGLU's default FFN, rounded to 64
    assert a.kv_channels == 32 and a.num_query_groups == 8  # no --group-query-attention: groups = heads
    assert a.recompute_granularity == "selective"
    assert a.padded_vocab_size == 1024 == padded_vocab(1000, 128, 2)  # a multiple of 128 x TP
    assert a.sequence_parallel is False and a.virtual_pipeline_model_parallel_size is None


def test_null_tokenizer_adds_end_of_document_and_tp_pads_the_vocabulary():
    a = parse(BASE + ["--tokenizer-type", "NullTokenizer", "--vocab-size", "128256", "--tensor-model-parallel-size",
                      "8"], strict=False).args
    assert a.vocab_size_unpadded == 128257 and a.padded_vocab_size == 129024  # 128257 up to a multiple of 1024


def test_vocabulary_from_a_known_tokenizer_or_a_clear_error():
    a = parse(BASE + ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "meta-llama/Meta-Llama-3-70B"],
              strict=False).args
    assert a.vocab_size_unpadded == 128256
    with pytest.raises(MegatronArgsError, match="add --vocab-size N"):
        parse(BASE + ["--tokenizer-model", "/models/unknown.model"], strict=False)


def test_virtual_stages_from_layers_per_virtual_stage():
    a = parse(BASE + ["--vocab-size", "128", "--pipeline-model-parallel-size", "2",
                      "--num-layers-per-virtual-pipeline-stage", "1"], strict=True).args
    assert a.virtual_pipeline_model_parallel_size == 2  # 4 layers / PP 2 = 2 per rank, 1 per virtual stage
    with pytest.raises(MegatronArgsError, match="pipeline-model-parallel-size > 1"):
        parse(BASE + ["--vocab-size", "128", "--num-layers-per-virtual-pipeline-stage", "1"], strict=True)


def test_moe_layer_frequency_expression():
    a = parse(BASE + ["--vocab-size", "128", "--num-experts", "8", "--moe-layer-freq", "([0]*1+[1]*3)"],
              strict=True).args
    assert a.moe_layer_pattern == [0, 1, 1, 1] and a.moe_ffn_hidden_size == a.ffn_hidden_size
    with pytest.raises(MegatronArgsError, match="moe-layer-freq"):
        parse(BASE + ["--vocab-size", "128", "--num-experts", "8", "--moe-layer-freq", "__import__('os')"],
              strict=True)


def test_unknown_flags_refused_by_the_training_loop_and_listed_for_the_estimate():
    with pytest.raises(SystemExit):
        parse(BASE + ["--vocab-size", "128", "--data-path", "/data/x"], strict=True)
    p = parse(BASE + ["--vocab-size", "128", "--data-path", "/data/x", "--tp-comm-overlap"], strict=False)
    assert p.unknown == ("--data-path", "--tp-comm-overlap")


def test_a_programs_extra_args_provider_adds_flags_the_training_loop_then_parses_strictly():
    """As Megatron-LM's parse_args(extra_args_provider): a fork's pretrain_gpt.py adds its own flags
    (tests/fixtures/megatron_fork/provider_fork; a real trial of it: tests/workloads/test_megatron_fork_trial.py)."""
    def add_fork_args(parser):
        group = parser.add_argument_group(title="fork")
        group.add_argument("--data-mix-temperature", type=float, default=1.0)
        return parser

    argv = BASE + ["--vocab-size", "128", "--data-mix-temperature", "0.7"]
    with pytest.raises(SystemExit):
        parse(argv, strict=True)
    a = parse(argv, strict=True, extra_args_provider=add_fork_args).args
    assert a.data_mix_temperature == 0.7 and a.num_layers == 4


def test_megatron_core_refuses_what_it_refuses():
    a = parse(BASE + ["--vocab-size", "128", "--tensor-model-parallel-size", "3"], strict=True).args
    with pytest.raises(MegatronArgsError, match="must be a multiple of tensor_model_parallel_size"):
        transformer_config(a)
