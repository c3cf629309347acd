"""Pre-flight: refuse a run this machine cannot hold, before any rank process is started.

A spec can ask for more than a machine has: ``mesh: {shape: [100000]}`` on gloo would start
100,000 processes; ``overrides: {hidden_size: 100000000}`` makes every rank die in the
allocator after minutes. :func:`check` estimates, in closed form (``harness.contract.calculator``:
torch.chunk shards, FSDP2's padding; nothing is run or allocated), the bytes one rank holds at
its peak, and refuses with :class:`PreflightError` when

- a local launch would start more rank processes than :func:`process_limit`;
- the ranks together would need more than this machine's available memory
  (``MemAvailable`` of ``/proc/meminfo``), or, on NCCL, one rank more than its GPU's free memory
  (:func:`gpu_need`: the rank's tensors, its CUDA context, NCCL's buffers, and on GPU 0 the
  ``numerics_reference: rank_0`` replica). Free GPU memory is read through NVML or ``nvidia-smi``
  (``harness.run.gpus``), never ``torch.cuda.mem_get_info``: that would create a CUDA context on
  every GPU in the launcher and in every pytest-xdist worker. Without either, the GPU part of the
  check is skipped with a note (:data:`GPU_CHECK_SKIPPED`);
- a simulated (fake backend) world is larger than :data:`MAX_SIMULATED_WORLD` ranks, or its
  set-up would chunk more than :data:`MAX_SIMULATED_SHARDINGS` unit shards (FSDP2 chunks
  every unit's parameters into one piece per world rank, again for every simulated rank).

The estimate (:func:`estimate`) is deliberately simple and on the generous side; the caller
can skip the check (``--no-preflight``, pytest ``--no-preflight``).

Per rank, in bytes (``S`` = a unit's padded shard, ``U`` = a unit's gathered parameters):

- sharded parameters, their gradients (storage dtype), optimizer state (AdamW: 2 x the
  shards; SGD: none);
- gathered parameters: two layers at a time (the current one and the prefetched one), every
  layer from forward to backward with ``reshard_after_forward: false``; the root's when it holds
  parameters (``causal_lm``: it stays gathered);
- backward buffers: for two layers in flight, the unsharded gradient and the reduce-scatter
  input twice (gloo reduces a copy of it);
- activations saved for backward, per layer ``B*L*(10 d + 4 h_q d_h + 4 h_kv d_h + 5 d_ffn)``
  elements in the compute dtype plus ``B*h_q*L*L`` float32 attention scores; the causal LM's
  logits ``B*L*V`` in the compute dtype plus three float32 copies (loss, its gradient);
- with ``numerics`` on, the replica before ``fully_shard``: the full model, its full gradients
  and the same activations (a cast copy of model and gradients when a MixedPrecisionPolicy
  computes in another dtype), plus the float32 gradient rows kept for the comparison;
- :data:`RANK_BASE_BYTES` per process (interpreter, torch, gloo, profiler).
"""

from __future__ import annotations

import glob
import os
import warnings
from dataclasses import dataclass
from typing import Any, Mapping

from harness.contract.machine import usable_cpus
from harness.run import cuda_context
from harness.run.launch.errors import RunError

__all__ = [
    "GPU_CHECK_SKIPPED",
    "MAX_SIMULATED_WORLD",
    "NCCL_COMMUNICATOR_BYTES",
    "RANK_BASE_BYTES",
    "Estimate",
    "PreflightError",
    "available_memory",
    "check",
    "estimate",
    "gpu_need",
    "process_limit",
]

GB = 10**9
"""Bytes in the GB the messages print (10^9, as the document's MB is 10^6)."""

MAX_SIMULATED_WORLD = 65536
"""Largest world the fake backend is asked to simulate (FSDP2's set-up per simulated rank
grows with the world: about 16 s for one Qwen3-32B layer at 4,096 ranks on a 2-core machine)."""

MAX_SIMULATED_SHARDINGS = 2**17
"""Most (FSDP unit, world rank, simulated rank) triples a simulation may cost: each simulated
rank runs ``fully_shard``, which chunks every unit's parameters into one piece per world rank,
about 4 ms per unit and world rank on a 2-core machine (131,072 of them: about 8 minutes)."""

RANK_BASE_BYTES = 200 * 10**6
"""Memory of one rank process beyond its tensors. Measured (benchmarks/bench_rank_memory.py,
torch 2.13 CPU): a walkthrough rank forked from the preloaded forkserver peaks at 96-112 MB
private, 139-208 MB proportional set size, tensors included; 8 ranks of
``specs/qwen3_0_6b_8_ranks.yaml`` peaked at 1.48-1.70 GB each (12.0 GB together) where
:func:`estimate` gives 1.83 GB each."""


NCCL_COMMUNICATOR_BYTES = 2 * 32 * 4 * 2**20
"""GPU memory one NCCL communicator takes per rank: NCCL's default ``NCCL_BUFFSIZE`` of 4 MiB
(NCCL documentation, "Environment Variables") for each direction of up to 32 channels. An upper
assumption: NCCL opens fewer channels on small worlds and PCIe-only hosts."""

GPU_CHECK_SKIPPED = (
    "pre-flight: no NVML (libnvidia-ml.so.1) and no nvidia-smi: free GPU memory unknown, "
    "the GPU part of the check is skipped"
)
"""The note :func:`check` warns with when NCCL may run but no source of GPU figures answers."""


class PreflightError(RunError):
    """The run would not fit this machine; nothing was started. The message says what it needs,
    what there is (``reason``), and how to go on (``advice``: simulate, or ``--no-preflight``)."""

    def __init__(self, reason: str, advice: str) -> None:
        super().__init__(f"{reason}; {advice}")
        self.reason, self.advice = reason, advice


@dataclass(frozen=True)
class Estimate:
    """Peak bytes one rank holds, by part (see the module docstring); ``per_rank`` is their sum."""

    params: int
    grads: int
    optimizer: int
    gathered: int
    backward_buffers: int
    activations: int
    replica: int
    base: int
    replica_once: int = 0
    """``numerics_reference: rank_0``: what rank 0 alone holds on top (the full replica); counted
    once for the host, not per rank."""

    @property
    def tensors(self) -> int:
        """Tensor bytes (the part that lives on the GPU under NCCL)."""
        return self.per_rank - self.base

    @property
    def per_rank(self) -> int:
        return (
            self.params
            + self.grads
            + self.optimizer
            + self.gathered
            + self.backward_buffers
            + self.activations
            + self.replica
            + self.base
        )


def _gb(n: float) -> str:
    value = n / GB
    return f"{value:.1f}" if value < 10 else f"{value:,.0f}"


def estimate(setup: Any) -> Estimate:
    """Peak bytes per rank of ``setup`` (a :class:`harness.load.setup.RunSetup`) on a real backend.

    Raises:
        ValueError: the setup's model config or sizes cannot be built (the loader reports those
            first, with their key paths).
    """
    from harness.contract import calculator as calc
    from model import get_config

    cfg = get_config(setup.model.config, **dict(setup.model.overrides))
    dims = calc.to_dims(cfg)
    mp = setup.fsdp.mixed_precision
    storage = calc.dtype_name(setup.model.dtype)
    compute = calc.dtype_name(mp.param_dtype) if mp and mp.param_dtype else storage
    reduce = calc.dtype_name(mp.reduce_dtype) if mp and mp.reduce_dtype else compute
    sb, cb, rb = calc.DTYPE_BYTES[storage], calc.DTYPE_BYTES[compute], calc.DTYPE_BYTES[reduce]
    raf = setup.fsdp.reshard_after_forward
    root_raf = setup.fsdp.root_reshard_after_forward
    causal = setup.model.body == "causal_lm"
    # The layer tables need only the shard size; a 1-rank group stands in for absurd worlds,
    # which the process limit refuses anyway.
    tables = calc.model_tables(
        dims,
        mesh_shape=tuple(setup.mesh_shape),
        body=setup.model.body,
        storage_dtype=storage,
        gather_dtype=compute,
        reduce_dtype=reduce,
        reshard_after_forward=raf,
        root_reshard_after_forward=False if root_raf is None else root_raf,
    )
    n_layers = dims.num_hidden_layers
    layer, root = tables.layer, tables.root
    units = [(layer, n_layers)] + ([(root, 1)] if root else [])

    shard_bytes = sum(u.padded_shard_numel * sb * n for u, n in units)
    optimizer = 2 * shard_bytes if setup.optimizer.name.lower() == "adamw" else 0
    if raf is False:
        kept = n_layers
    elif raf is True:
        kept = min(2, n_layers)
    else:  # an int: a 1/k piece of each layer stays gathered until backward, plus two gathered layers
        kept = min(2, n_layers) + n_layers / raf
    gathered = int(kept * layer.padded_numel * cb) + (root.padded_numel * cb if root else 0)
    backward = min(2, n_layers) * layer.padded_numel * (cb + 2 * rb) + (
        root.padded_numel * (cb + 2 * rb) if root else 0
    )

    B, L, d = setup.batch_per_rank, setup.seq_len, dims.hidden_size
    q_out, kv_out = dims.num_attention_heads * dims.head_dim, dims.num_key_value_heads * dims.head_dim
    per_layer = (
        B * L * (10 * d + 4 * q_out + 4 * kv_out + 5 * dims.intermediate_size) * cb
        + B * dims.num_attention_heads * L * L * 4
    )
    activations = n_layers * per_layer
    if causal:
        activations += B * L * (dims.vocab_size or 0) * (cb + 12) + B * L * d * cb

    replica = replica_once = 0
    if setup.numerics:  # the replica's phase comes before fully_shard; count whichever phase is larger
        full = n_layers * layer.numel + (root.numel if root else 0)
        replica_phase = (
            full * sb * 2 + (full * cb * 2 if compute != storage else 0) + activations + min(full, 64 * 2**20) * 4
        )  # full params and grads, a cast copy, activations, the fp32 bucket
        fsdp_phase = gathered + backward + activations
        grad_rows = sum(u.padded_shard_numel * 4 * n for u, n in units)  # float32 rows kept to compare
        replica = max(0, replica_phase - fsdp_phase) + grad_rows
        if getattr(setup, "numerics_reference", "each_rank") == "rank_0" and getattr(setup, "schedule", None) is None:
            # rank 0 alone: the replica, plus float32 sums of every gradient
            replica_once, replica = replica_phase + full * 4, grad_rows
    return Estimate(
        params=shard_bytes,
        grads=shard_bytes,
        optimizer=optimizer,
        gathered=gathered,
        backward_buffers=backward,
        activations=activations,
        replica=replica,
        base=RANK_BASE_BYTES,
        replica_once=replica_once,
    )


def simulation_size(setup: Any) -> tuple[int | None, int]:
    """(FSDP units with parameters, ranks simulated) of a fake-backend run; units None when the
    model config cannot be built (the loader reports that)."""
    from harness.run.launch.simulated import ALL_RANKS_UP_TO

    world = setup.world_size
    observed = len(set(setup.observe_ranks)) if setup.observe_ranks else (world if world <= ALL_RANKS_UP_TO else 1)
    try:
        from model import get_config

        layers = get_config(setup.model.config, **dict(setup.model.overrides)).num_hidden_layers
    except (ValueError, TypeError, KeyError):
        return None, observed
    return layers + (1 if setup.model.body == "causal_lm" else 0), observed


def available_memory() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def process_limit() -> int:
    """Most rank processes a local launch may start: 4 per CPU core, at least 16, and no more
    than half of what ``RLIMIT_NPROC`` leaves when it is set."""
    limit = max(16, 4 * usable_cpus())
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
        if soft != resource.RLIM_INFINITY:
            limit = min(limit, max(1, soft // 2))
    except (ImportError, OSError, ValueError):
        pass
    return limit


_ADVICE = "use --backend fake to simulate it, or --no-preflight to run anyway"


def check(
    setup: Any, backend: str, *, joined: bool = False, memory: int | None = None, gpus: list[int] | None = None
) -> Estimate | None:
    """Refuse ``setup`` on ``backend`` if this machine cannot run it; return the estimate.

    Args:
        setup: the run setup.
        backend: "auto", "gloo", "nccl" or "fake".
        joined: this process is one rank of a launcher's world (torchrun): its launcher chose
            the processes; only the fake-world bound applies.
        memory: available host bytes (default :func:`available_memory`).
        gpus: free bytes per visible GPU (default: read through NVML or nvidia-smi when NCCL may be
            used; never through torch, which would create a CUDA context on each GPU).

    Raises:
        PreflightError: with what the run needs, what there is, and what to do instead.
    """
    world = setup.world_size
    if backend == "fake":
        if world > MAX_SIMULATED_WORLD:
            raise PreflightError(
                f"a simulated world of {world:,} ranks is over the {MAX_SIMULATED_WORLD:,} the fake "
                f"backend is asked to simulate (its set-up grows with the world size)",
                "use --no-preflight to try anyway",
            )
        units, observed = simulation_size(setup)
        if units is not None and units * world * observed > MAX_SIMULATED_SHARDINGS:
            raise PreflightError(
                f"simulating {units:,} FSDP units on {world:,} ranks for {observed:,} observed "
                f"rank(s) chunks {units * world * observed:,} unit shards, over the "
                f"{MAX_SIMULATED_SHARDINGS:,} this check allows (about 4 ms each)",
                "observe fewer ranks, run fewer layers, or use --no-preflight to try anyway",
            )
        return None
    if joined:
        return None
    limit = process_limit()
    if world > limit:
        raise PreflightError(
            f"{world:,} ranks would start {world:,} processes on this machine, over its limit of "
            f"{limit} ({usable_cpus()} cores)",
            _ADVICE,
        )
    try:
        est = estimate(setup)
    except (ValueError, TypeError, KeyError):
        return None  # the loader reports a bad model config with its key path
    if gpus is None and backend in ("auto", "nccl"):
        gpus = _free_gpu_memory(backend)
    on_gpu = gpus is not None and len(gpus) >= world
    host_per_rank = est.base if on_gpu else est.per_rank
    memory = available_memory() if memory is None else memory
    if on_gpu:
        context = cuda_context.context_bytes()
        per_rank, on_gpu_0 = gpu_need(est, setup, context)
        for rank, free in enumerate(gpus[:world]):
            need = on_gpu_0 if rank == 0 else per_rank
            if need > free:
                nccl = per_rank - est.tensors - context
                parts = f"{_gb(est.tensors)} GB tensors + {_gb(context)} GB CUDA context + {_gb(nccl)} GB NCCL" + (
                    f" + {_gb(est.replica_once)} GB replica" if need > per_rank else ""
                )
                raise PreflightError(
                    f"needs ~{_gb(need)} GB of GPU memory per rank on GPU {rank} ({parts}), {_gb(free)} GB free on it",
                    _ADVICE,
                )
    once = 0 if on_gpu else est.replica_once  # on NCCL the replica lives on GPU 0 (gpu_need)
    if memory is not None and host_per_rank * world + once > memory:
        extra = f" + ~{_gb(once)} GB on rank 0 (the replica)" if once else ""
        raise PreflightError(
            f"needs ~{_gb(host_per_rank)} GB per rank × {world} ranks{extra}, {_gb(memory)} GB available", _ADVICE
        )
    return est


def _gpu_device_nodes() -> bool:
    """Whether this host shows a GPU device node (NVIDIA's ``/dev/nvidia<N>``, ROCm's ``/dev/kfd``).
    Without one CUDA cannot be available, and "auto" resolves to gloo: no need to run nvidia-smi
    on the critical path of every CPU run."""
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/kfd")


def gpu_need(est: Estimate, setup: Any, context_bytes: int | None = None) -> tuple[int, int]:
    """(bytes every rank needs on its GPU, bytes rank 0 needs on GPU 0) under NCCL: the rank's tensors,
    its CUDA context (``context_bytes``; default: measured once on this machine and cached,
    :func:`harness.run.cuda_context.context_bytes`), :data:`NCCL_COMMUNICATOR_BYTES` for each communicator (the world's,
    plus one per mesh dimension of a 2-D mesh), and on GPU 0 the ``numerics_reference: rank_0``
    replica (``harness.run.build.reference_from_rank_0`` builds it on rank 0's device)."""
    mesh = tuple(setup.mesh_shape)
    communicators = 1 + (len(mesh) if len(mesh) > 1 else 0)
    if context_bytes is None:
        context_bytes = cuda_context.context_bytes()
    per_rank = est.tensors + context_bytes + communicators * NCCL_COMMUNICATOR_BYTES
    return per_rank, per_rank + est.replica_once


def _free_gpu_memory(backend: str) -> list[int] | None:
    """Free bytes of each GPU a rank would see (``CUDA_VISIBLE_DEVICES`` order), read without a CUDA
    context (``harness.run.gpus``); None where there is no GPU or no way to ask (a warning says so
    when NCCL may run)."""
    if backend == "auto" and not _gpu_device_nodes():
        return None
    from harness.run.gpus import visible_gpus

    gpus = visible_gpus()
    if gpus is None:
        warnings.warn(GPU_CHECK_SKIPPED, RuntimeWarning, stacklevel=3)
        return None
    return [g.free_bytes for g in gpus]


def describe(est: Estimate) -> Mapping[str, int]:
    """The estimate's parts (bytes), for messages and tests."""
    return {
        k: getattr(est, k)
        for k in (
            "params",
            "grads",
            "optimizer",
            "gathered",
            "backward_buffers",
            "activations",
            "replica",
            "base",
            "replica_once",
        )
    } | {"per_rank": est.per_rank}
