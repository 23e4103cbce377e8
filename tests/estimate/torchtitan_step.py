"""Ground truth for the torchtitan estimate: torchtitan's own model, parallelize and optimizer code trained for real
on this CPU, in one process, the way ``torchtitan.train.Trainer`` builds and steps it (meta init, ``parallelize_fn``,
``to_empty`` + ``init_weights``, ``build_optimizers``, its loss, gradient accumulation, ``clip_grad_norm_``).

Not ``torchtitan.train`` itself: no tokenizer or dataloader (random tokens of the job's shape), one rank. The only CPU
fix it needs is torchtitan's device type (it picks "cuda" at import when no GPU is visible); nothing else changes.
Prints one line: ``peak_data_bytes=N``, the peak data segment, the figure a capped trial is limited by.

    python tests/estimate/torchtitan_step.py JOB.toml [--section.field VALUE ...]
"""

import os
import sys

import torch
import torch._utils

if not torch.cuda.is_available():
    torch._utils._get_available_device_type = lambda: "cpu"  # torchtitan reads it once, at import

import torch.distributed as dist  # noqa: E402
from torchtitan.config import TORCH_DTYPE_MAP, ConfigManager  # noqa: E402
from torchtitan.distributed import ParallelDims  # noqa: E402
from torchtitan.distributed import utils as dist_utils  # noqa: E402
from torchtitan.protocols.train_spec import get_train_spec  # noqa: E402
from torchtitan.tools import utils as tt_utils  # noqa: E402

from infrarsi.procmem import peak_data_bytes  # noqa: E402


def main(argv):
    cfg = ConfigManager().parse_args(["--job.config_file", argv[0], *argv[1:]])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    p, t = cfg.parallelism, cfg.training
    dims = ParallelDims(dp_shard=p.data_parallel_shard_degree, dp_replicate=p.data_parallel_replicate_degree,
                        cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=1, ep=1, etp=1, world_size=1)
    dims.build_mesh()
    spec = get_train_spec(cfg.model.name)
    margs = spec.model_args[cfg.model.flavor]
    margs.update_from_config(cfg)
    torch.manual_seed(0)
    with torch.device("meta"), tt_utils.set_default_dtype(TORCH_DTYPE_MAP[t.dtype]):
        model = spec.model_cls(margs)
    model = spec.parallelize_fn(model, dims, cfg)
    model.to_empty(device="cpu")
    with torch.no_grad():
        model.init_weights(buffer_device=None)
    model.train()
    opts = spec.build_optimizers_fn([model], cfg.optimizer, dims)
    loss_fn = spec.build_loss_fn(cfg, parallel_dims=dims)
    amp = dist_utils.maybe_enable_amp(dims, t.mixed_precision_param, "cpu")
    gbs = t.global_batch_size if t.global_batch_size > 0 else t.local_batch_size
    accum = gbs // t.local_batch_size
    vocab = margs.vocab_size
    for _ in range(3):
        opts.zero_grad()
        for _ in range(accum):
            inputs = torch.randint(0, vocab, (t.local_batch_size, t.seq_len))
            labels = torch.randint(0, vocab, (t.local_batch_size, t.seq_len))
            with amp:
                pred = model(inputs)
                loss = loss_fn(pred, labels) / float(gbs * t.seq_len)
                del pred
            loss.backward()
        dist_utils.clip_grad_norm_(list(model.parameters()), t.max_norm, foreach=True)
        opts.step()
    print(f"peak_data_bytes={int(peak_data_bytes())}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
