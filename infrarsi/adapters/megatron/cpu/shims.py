"""megatron-core on the CPU: the shims that let its GPU code path run there (training and fake-tensor estimates).

megatron-core 0.16 cannot run a step without CUDA: it allocates on ``torch.cuda.current_device()`` and on
literal ``"cuda"`` devices, forks CUDA RNG states for dropout, asks for CUDA streams and synchronizes, and its
optimizers check for ``torch.cuda.*`` tensor type names. :func:`install_cpu_fixes` installs eight shims; none
changes what is computed. ``launchers/pretrain_gpt_cpu.py`` installs them before training when no GPU is
present; the Megatron estimate (``infrarsi.adapters.megatron.estimate.step``) installs them in its own process, whose
fake tensors are CPU tensors, so the step it prices runs the same code path the CPU training loop runs.

1. "cuda" is the CPU. A ``TorchFunctionMode`` rewrites a CUDA device argument (``"cuda"``, ``"cuda:N"``, an
   integer index, ``torch.device("cuda")``) of any torch call to the CPU, ``Tensor.cuda()`` to the tensor itself
   and ``pin_memory=True`` to False (pinning needs CUDA). Every megatron-core allocation on
   ``torch.cuda.current_device()`` (the global memory buffer, p2p receive buffers, DDP's param and grad buffers,
   the causal mask, the MoE router's buffers) then lands on the CPU.
2. ``torch.cuda.current_device()`` is 0 and ``device_count()`` 1 (the index the device mode maps; one device per
   process, as one GPU per rank).
3. The CUDA RNG tracker uses the CPU generator: megatron-core keeps named RNG states (the model-parallel one
   makes dropout inside tensor-parallel regions differ across TP ranks) and swaps them in and out of "the CUDA
   generator" around each region; here they are swapped in and out of the CPU generator, which is the one the
   ops of item 1 draw from. ``torch.cuda.manual_seed`` seeds nothing (the states are made by the tracker) and
   ``torch.cuda.get_rng_state`` reads the CPU state. The tracker's warning "CPU RNG state changed within GPU RNG
   context" says exactly that the CPU generator is in use inside a fork, so it is filtered out.
4. Tensor type names report CUDA: ``Tensor.type()`` (no argument) gives ``torch.cuda.BFloat16Tensor`` for a bf16
   CPU tensor. megatron-core's optimizers (``Float16OptimizerWithFloat16Params``, ``DistributedOptimizer``) sort
   parameters into fp16/bf16 and fp32 groups by these names and refuse any other.
5. Streams and events are no-ops that run in order (``torch.cuda.Stream``, ``Event``, ``stream()``,
   ``current_stream()``, ``synchronize()``): the CPU runs every op in program order, which is what a stream wait
   guarantees on a GPU.
6. ``torch.distributed.barrier(device_ids=...)`` drops ``device_ids`` (a CUDA argument gloo refuses).
7. The MoE all-to-all dispatcher's split sizes are host lists. It copies them device-to-host with
   ``moe_utils.maybe_move_tensor_to_cpu(t, as_numpy=True)``, which converts only tensors that are on a GPU
   (``t.is_cuda``); on the CPU they stay tensors, which ``all_to_all_single`` refuses. Here a CPU tensor asked
   for as numpy is converted too (a fake one, in the estimate, through ``.tolist()``).
8. megatron-core's fusions are ``torch.compile``'d functions; they run eagerly (the same math): compiling on
   the CPU costs minutes and its worker processes would show in the measured peak. (This one is
   :func:`infrarsi.adapters.megatron.cpu.model.eager_fusions`, which the loop calls on any device: the estimate
   prices the eager fusions too.)
"""

from __future__ import annotations

import contextlib
import logging


def _cpu(device):
    """A CUDA device argument as the CPU; anything else unchanged."""
    import torch

    if isinstance(device, bool):
        return device
    if isinstance(device, int) or (isinstance(device, str) and device.startswith("cuda")) or (
            isinstance(device, torch.device) and device.type == "cuda"):
        return torch.device("cpu")
    return device


def _cuda_is_cpu_mode():
    import torch
    from torch.overrides import TorchFunctionMode

    class CudaIsCpu(TorchFunctionMode):
        """Shims 1 and 4: CUDA device arguments are the CPU; type names report CUDA."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is torch.autograd.backward:
                return _backward_in(self, *args, **kwargs)
            if "device" in kwargs:
                kwargs["device"] = _cpu(kwargs["device"])
            if kwargs.get("pin_memory"):
                kwargs["pin_memory"] = False
            if func is torch.Tensor.cuda:
                return args[0]
            if func is torch.Tensor.type and len(args) == 1 and not kwargs:
                name = func(*args)
                return name if name.startswith("torch.cuda.") else name.replace("torch.", "torch.cuda.", 1)
            if func in (torch.Tensor.to, torch.Tensor.new_empty, torch.Tensor.new_zeros) and len(args) > 1:
                args = (args[0], *(_cpu(a) if isinstance(a, (str, int, torch.device)) else a for a in args[1:]))
            return func(*args, **kwargs)

    return CudaIsCpu()


def _backward_in(mode, tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """``torch.autograd.backward`` run with ``mode`` active. A mode is off while it handles a call, and
    megatron-core's full recompute calls ``torch.autograd.backward`` inside its checkpoint's backward, whose
    recomputed forward allocates on ``torch.cuda.current_device()``; so the pass runs here, with the mode back on,
    through the same steps as torch's own ``backward`` (tensors and gradients as tuples, default gradients, then
    the engine)."""
    import torch
    from torch.autograd import _make_grads, _tensor_or_tensors_to_tuple
    from torch.autograd.graph import _engine_run_backward

    tensors = (tensors,) if isinstance(tensors, torch.Tensor) else tuple(tensors)
    grads = _make_grads(tensors, _tensor_or_tensors_to_tuple(grad_tensors, len(tensors)), is_grads_batched=False)
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs) if inputs is not None else ()
    with mode:
        _engine_run_backward(tensors, grads, create_graph if retain_graph is None else retain_graph, create_graph,
                             inputs, allow_unreachable=True, accumulate_grad=True)


class _InOrder:
    """Shim 5: a stream or event of a device that runs every op in program order."""

    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, *args):
        pass

    def wait_event(self, *args):
        pass

    def record_event(self, *args):
        return _InOrder()

    def record(self, *args):
        pass

    def synchronize(self):
        pass

    def query(self):
        return True

    def elapsed_time(self, other):
        return 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _NotInsideFork(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "CPU RNG state changed within GPU RNG context" not in record.getMessage()


_INSTALLED = False


def install_cpu_fixes() -> None:
    """The shims above (once per process). Call before megatron-core builds anything."""
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    import torch
    import torch.distributed as dist

    import megatron.core.tensor_parallel.random as rng

    # 2. one device, index 0
    torch.cuda.current_device = lambda: 0
    torch.cuda.device_count = lambda: 1
    # 3. RNG states of the CPU generator
    torch.cuda.manual_seed = lambda seed: None
    torch.cuda.get_rng_state = lambda device="cuda": torch.get_rng_state()
    rng._get_cuda_rng_state = lambda device="cuda", clone=False, graph_safe=False: torch.get_rng_state()
    rng._set_cuda_rng_state = lambda new_state, device=-1, graph_safe=False: torch.set_rng_state(new_state)
    logging.getLogger(rng.__name__).addFilter(_NotInsideFork())
    # 5. streams and events in program order
    torch.cuda.Stream = _InOrder
    torch.cuda.Event = _InOrder
    torch.cuda.stream = lambda stream=None: contextlib.nullcontext()
    torch.cuda.current_stream = lambda device=None: _InOrder()
    torch.cuda.default_stream = lambda device=None: _InOrder()
    torch.cuda.synchronize = lambda device=None: None
    # 6. barriers without CUDA device ids
    barrier = dist.barrier

    def cpu_barrier(group=None, async_op=False, device_ids=None):
        return barrier(group=group, async_op=async_op)

    dist.barrier = cpu_barrier
    # 7. host split sizes as numpy, as after a device-to-host copy
    import megatron.core.transformer.moe.token_dispatcher as dispatcher

    to_cpu = dispatcher.maybe_move_tensor_to_cpu

    def maybe_move_tensor_to_cpu(tensor, as_numpy=False, record_stream=False):
        if as_numpy and torch.is_tensor(tensor) and not tensor.is_cuda:
            from torch._subclasses.fake_tensor import FakeTensor

            if isinstance(tensor, FakeTensor):  # the estimate: values read through .tolist() (its shadows)
                import numpy

                return numpy.array(tensor.tolist(), dtype=numpy.int64)
            return tensor.numpy()
        return to_cpu(tensor, as_numpy=as_numpy, record_stream=record_stream)

    dispatcher.maybe_move_tensor_to_cpu = maybe_move_tensor_to_cpu
    # 1 and 4: entered for the rest of the process
    _cuda_is_cpu_mode().__enter__()


def needs_cpu_fixes() -> bool:
    import torch

    return not torch.cuda.is_available()
