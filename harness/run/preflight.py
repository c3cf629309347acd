"""Pre-flight: refuse a run this machine cannot hold, before any rank process is started.

A spec can ask for more than a machine has (``mesh: {shape: [100000]}`` on gloo starts 100,000
processes). :func:`check` estimates in closed form (``harness.calculator``; nothing is run or
allocated) the bytes one rank holds at its peak and raises :class:`PreflightError` when a local
launch would exceed :func:`process_limit`, the host's ``MemAvailable``, or on NCCL a GPU's free
memory (:func:`gpu_need`; read through ``harness.run.gpus``, never ``torch.cuda.mem_get_info``,
which would create a CUDA context on every GPU), or when a simulated run would exceed its timeout
or the memory (:func:`simulation_estimate`). What :func:`estimate` counts, part by part:
docs/command-line.md, "Pre-flight estimate, part by part"."""

from __future__ import annotations

import glob
import math
import os
import warnings
from dataclasses import dataclass
from typing import Any, Mapping

from harness.contract.machine import usable_cpus
from harness.run import cuda_context
from harness.run.launch.errors import RunError

__all__ = [
    "CLI_OPTIONS",
    "GPU_CHECK_SKIPPED",
    "NCCL_COMMUNICATOR_BYTES",
    "PYTEST_OPTIONS",
    "RANK_BASE_BYTES",
    "SIMULATED_BASE_BYTES",
    "SIMULATED_LAYER_S",
    "SIMULATED_SHARD_BYTES",
    "SIMULATED_SHARD_S",
    "Estimate",
    "PreflightError",
    "SimulationEstimate",
    "available_memory",
    "check",
    "estimate",
    "gpu_need",
    "process_limit",
    "refuse_simulation",
    "simulated_run_estimate",
    "simulation_estimate",
]

GB = 10**9
"""Bytes in the GB the messages print (10^9, as the document's MB is 10^6)."""

SIMULATED_SHARD_S = 10e-6
"""Seconds a simulated rank spends per (parameter, world rank): FSDP2's ``fully_shard`` chunks each
parameter into one piece per rank of the shard group, twice (``harness.run.rank.fake``), and that
dominates a large world. Measured (benchmarks/bench_simulated_worlds.py, 2 cores, load 3-5): a
Qwen3-32B layer (11 parameters) at 65,536 ranks spent 5.5 s in set-up (7.6 us each), a
Qwen3-235B-A22B layer (11) at 131,072 ranks 9.4 s (6.5 us); rounded up for a loaded machine."""

SIMULATED_LAYER_S = 1.0
"""Seconds per decoder layer and simulated rank for the forward, backward, optimizer step and the
observation, whatever the world (measured 0.45 s for the Qwen3-32B layer, 0.9 s for the MoE one)."""

SIMULATED_BASE_BYTES = 500 * 10**6
"""Memory of the simulating process beyond what grows with the world: the interpreter, torch and
FSDP2 imported, the recorders (measured: 337 MB peak RSS for a Qwen3-32B layer at 16,384 ranks)."""

SIMULATED_SHARD_BYTES = 200
"""Bytes per (parameter, world rank) a simulated rank holds at its peak (measured: 25 MB more for
49,152 more ranks of the Qwen3-32B layer, 60 MB more for 65,536 more of the MoE layer; about 40-85 B)."""

CLI_OPTIONS = {"backend": "--backend", "no_preflight": "--no-preflight", "timeout": "--timeout"}
"""How a refusal's advice names the options: ``python -m harness run``'s."""

PYTEST_OPTIONS = {
    "backend": "--fsdp2-backend",
    "no_preflight": "--fsdp2-no-preflight",
    "timeout": "--fsdp2-run-timeout",
}
"""The pytest plugin's names of the same options (``harness.pytest_plugin``)."""

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
    """The run would not fit this machine; nothing was started. The message is ``reason``; ``advice``.

    ``advice`` may name ``{backend}``, ``{no_preflight}``, ``{timeout}``, spelt as :data:`CLI_OPTIONS`
    (or another caller's names, :meth:`for_options`)."""

    def __init__(self, reason: str, advice: str, options: Mapping[str, str] = CLI_OPTIONS) -> None:
        self.reason, self.template, self.options = reason, advice, dict(options)
        self.advice = advice.format(**options)
        super().__init__(f"{reason}; {self.advice}")

    def for_options(self, options: Mapping[str, str]) -> "PreflightError":
        """The same refusal, its advice naming ``options`` (e.g. :data:`PYTEST_OPTIONS`)."""
        return PreflightError(self.reason, self.template, options)


@dataclass(frozen=True)
class SimulationEstimate:
    """What a fake-backend run of a setup costs this process (:func:`simulation_estimate`):
    ``observed`` ranks simulated one after the other, ``parameters`` each chunked ``world_size`` ways,
    ``layers`` of step each; ``seconds`` for the whole simulation, ``bytes`` this process's peak."""

    observed: int
    parameters: int
    world_size: int
    layers: int
    seconds: float
    bytes: int

    def describe(self) -> str:
        """One line: the estimate and where it comes from."""
        return (
            f"~{_seconds(self.seconds)} for {self.observed:,} simulated rank(s) (each: {self.parameters:,} "
            f"parameters chunked {self.world_size:,} ways at ~{SIMULATED_SHARD_S * 1e6:g} us, and "
            f"{self.layers:,} layer(s) of step)"
        )


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 10_000 else f"{s / 3600:,.0f} h"


@dataclass(frozen=True)
class Estimate:
    """Peak bytes one rank holds, by part (docs/command-line.md); ``per_rank`` is their sum."""

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

    Raises ValueError where the model config or sizes cannot be built (the loader reports those first)."""
    from harness import calculator as calc
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


def simulation_estimate(setup: Any) -> SimulationEstimate | None:
    """:func:`simulated_run_estimate` of ``setup``; None when its model config cannot be built."""
    from harness.run.launch.simulated import ALL_RANKS_UP_TO
    from model import get_config

    world = setup.world_size
    observed = len(set(setup.observe_ranks)) if setup.observe_ranks else (world if world <= ALL_RANKS_UP_TO else 1)
    try:
        config = get_config(setup.model.config, **dict(setup.model.overrides))
        return simulated_run_estimate(
            config,
            world_size=world,
            shard_size=setup.shard_count * setup.tp_size,  # the ways a TP weight is cut
            body=setup.model.body,
            dtype=setup.model.dtype,
            observed=observed,
        )
    except (ValueError, TypeError, KeyError):
        return None


def simulated_run_estimate(
    config: Any, *, world_size: int, shard_size: int, body: str, dtype: Any, observed: int
) -> SimulationEstimate:
    """Seconds and bytes to simulate ``observed`` ranks of a ``world_size``-rank world of ``config`` (a
    ``Qwen3Config``): per rank :data:`SIMULATED_SHARD_S` per (parameter, world rank) plus
    :data:`SIMULATED_LAYER_S` per layer; :data:`SIMULATED_BASE_BYTES` plus :data:`SIMULATED_SHARD_BYTES`
    per (parameter, world rank), plus the shards held in CPU storage (``harness.run.rank.fake``).
    Raises ValueError, TypeError or KeyError for a config the calculator cannot read."""
    from harness import calculator as calc
    from harness.run.rank.fake import LAZY_SHARD_BYTES

    world = world_size
    dims = calc.to_dims(config)
    root = calc.root_params(dims) if body == "causal_lm" else []
    layer = calc.layer_params(dims)
    layers = dims.num_hidden_layers
    parameters = layers * len(layer) + len(root)
    storage = calc.DTYPE_BYTES[calc.dtype_name(dtype)]
    shard = (layers * sum(p.numel for p in layer) + sum(p.numel for p in root)) * storage // shard_size
    shard = shard if shard <= LAZY_SHARD_BYTES else 0  # larger shards stay on the meta device
    per_rank_s = SIMULATED_SHARD_S * parameters * world + SIMULATED_LAYER_S * max(layers, 1)
    return SimulationEstimate(
        observed=observed,
        parameters=parameters,
        world_size=world,
        layers=layers,
        seconds=observed * per_rank_s,
        bytes=SIMULATED_BASE_BYTES + SIMULATED_SHARD_BYTES * parameters * world + 2 * shard,
    )


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
    """Most rank processes a local launch may start: 4 per core, at least 16, at most half of ``RLIMIT_NPROC``."""
    limit = max(16, 4 * usable_cpus())
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
        if soft != resource.RLIM_INFINITY:
            limit = min(limit, max(1, soft // 2))
    except (ImportError, OSError, ValueError):
        pass
    return limit


_ADVICE = "use {backend} fake to simulate it, or {no_preflight} to run anyway"

MAX_WAIT_S = 24 * 3600
"""Longest simulation a refusal suggests allowing the time for (as ``run --timeout`` accepts)."""

DEFAULT_TIMEOUT_S = 300.0
"""The run's timeout where the caller names none (``harness.run.runner.run_setup``'s default)."""


def _check_simulated(setup: Any, timeout_s: float, memory: int | None) -> SimulationEstimate | None:
    est = simulation_estimate(setup)
    return None if est is None else refuse_simulation(est, timeout_s, memory)


def refuse_simulation(
    est: SimulationEstimate, timeout_s: float = DEFAULT_TIMEOUT_S, memory: int | None = None
) -> SimulationEstimate:
    """``est``, unless it exceeds ``timeout_s`` (s) or ``memory`` (bytes; default :func:`available_memory`):
    then PreflightError, with the estimate and what to change."""
    if est.seconds > timeout_s:
        more_time = (
            f", or allow it the time ({{timeout}} {math.ceil(est.seconds * 1.5)})" if est.seconds <= MAX_WAIT_S else ""
        )
        raise PreflightError(
            f"simulating a world of {est.world_size:,} ranks would take {est.describe()}, over the run's "
            f"timeout of {timeout_s:g} s",
            f"observe fewer ranks (setup.observe_ranks) or run fewer layers{more_time}",
        )
    memory = available_memory() if memory is None else memory
    if memory is not None and est.bytes > memory:
        raise PreflightError(
            f"simulating a world of {est.world_size:,} ranks needs ~{_gb(est.bytes)} GB in this process "
            f"({est.parameters:,} parameters chunked {est.world_size:,} ways), {_gb(memory)} GB available",
            "simulate a smaller world or fewer layers",
        )
    return est


def check(
    setup: Any,
    backend: str,
    *,
    joined: bool = False,
    memory: int | None = None,
    gpus: list[int] | None = None,
    timeout_s: float | None = None,
) -> Estimate | SimulationEstimate | None:
    """Refuse ``setup`` on ``backend`` ("auto", "gloo", "nccl", "fake") if this machine cannot run it.

    ``joined``: this process is one rank of a launcher's world (torchrun), so only a simulation is
    checked. ``memory``: available host bytes; ``gpus``: free bytes per visible GPU (defaults: read
    here, never through torch). ``timeout_s``: the run's timeout in s, which a simulation must fit.
    Returns the :class:`Estimate` or :class:`SimulationEstimate`, or None where nothing could be
    estimated. Raises :class:`PreflightError` with what the run needs, what there is, and what to do."""
    world = setup.world_size
    timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    if backend == "fake":
        return _check_simulated(setup, timeout_s, memory)
    if joined:
        return None
    limit = process_limit()
    if world > limit:  # --no-preflight would start them all: point at the simulation alone
        try:
            simulated = _check_simulated(setup, timeout_s, memory)
            advice = "use {backend} fake to simulate it" + (
                f" ({simulated.describe()})" if simulated is not None else ""
            )
        except PreflightError as refused:
            advice = f"simulated, it would be refused too: {refused.reason}; {refused.template}"
        raise PreflightError(
            f"{world:,} ranks would start {world:,} processes on this machine, over its limit of "
            f"{limit} ({usable_cpus()} cores)",
            advice,
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
    """Whether a GPU device node exists; without one "auto" is gloo and nvidia-smi need not run."""
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/kfd")


def gpu_need(est: Estimate, setup: Any, context_bytes: int | None = None) -> tuple[int, int]:
    """(bytes each rank needs on its GPU, bytes rank 0 needs on GPU 0) under NCCL: tensors, CUDA context
    (default :func:`harness.run.cuda_context.context_bytes`), :data:`NCCL_COMMUNICATOR_BYTES` per
    communicator (the world's, plus one per dimension of a 2-D mesh), and on GPU 0 the
    ``numerics_reference: rank_0`` replica."""
    mesh = tuple(setup.mesh_shape)
    communicators = 1 + (len(mesh) if len(mesh) > 1 else 0)
    if context_bytes is None:
        context_bytes = cuda_context.context_bytes()
    per_rank = est.tensors + context_bytes + communicators * NCCL_COMMUNICATOR_BYTES
    return per_rank, per_rank + est.replica_once


def _free_gpu_memory(backend: str) -> list[int] | None:
    """Free bytes of each visible GPU, in ``CUDA_VISIBLE_DEVICES`` order, read without a CUDA context;
    None where there is no GPU or no way to ask (a warning says so when NCCL may run)."""
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
