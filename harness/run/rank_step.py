"""One rank's FSDP2 training step, as a :class:`~harness.load.setup.RunSetup` describes it, observed.

Given an initialized default process group (gloo, NCCL or the fake one), :func:`run_rank`:

1. builds the model with the setup's seed, identically on every rank (same full weights), in
   ``setup.param_dtype`` at construction (with ``setup.numerics`` off: on the meta device,
   materialized after ``fully_shard`` with only this rank's shards, see
   :func:`_init_local_shards`);
2. makes the global batch (seeded) and keeps this rank's samples ``r*B .. r*B+B-1``, the
   document's table ("Rank 0: batch 样本 0, 1", ...). With HSDP the data-parallel rank is the
   global rank: every rank of the mesh holds distinct samples;
3. if ``setup.numerics``, runs the plain replica on this rank's chunk and averages its
   gradients over ranks with a plain all-reduce (``recorders.numerics``);
4. ``init_device_mesh(device, mesh_shape, mesh_dim_names)``; ``fully_shard`` on each decoder
   layer, then on the root (the document's "FSDP2 设置"); for a 2-D mesh torch treats dim 0
   as replicate and dim 1 as shard (HSDP);
5. one step: forward, loss, backward, ``optimizer.step()``, phases marked;

and records the rank's entry of the observation document (schema:
``harness/schemas/observation.schema.json``, ``$defs/rank``).

Losses (float32): ``decoder_layers``: ``output.float().pow(2).mean()`` on hidden states
[B, L, d] drawn from N(0, 1) in float32 then cast to the parameter dtype; ``causal_lm``:
cross-entropy of the logits at positions 0..L-2 against the tokens at 1..L-1, tokens uniform
in [0, V). Weights are drawn with ``torch.Generator().manual_seed(seed)``, the batch with
``manual_seed(seed + 1)``.

Under the fake backend (``simulated=True``) the same code runs inside ``FakeTensorMode``:
no data, no numerics, only this rank's inputs are made; the mesh is built before entering
the fake mode (``DeviceMesh`` reads its rank map as real values).
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from typing import Any, Callable, Mapping

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import model as qwen3
from harness.run.recorders.collectives import CollectiveRecorder, attribute, dtype_name, profiler_spans
from harness.run.recorders.memory import MemoryRecorder
from harness.run.recorders.numerics import compare, compute_reference
from harness.run.recorders.params import ParamStateHooks, Unit, param_owner, param_table
from harness.run.recorders.phases import Phases
from harness.load.setup import RunSetup

__all__ = ["run_rank", "run_step", "FAULT_KINDS"]

FAULT_KINDS = ("raise", "hang", "exit")



@contextlib.contextmanager
def _muted_stderr_fd():
    """Send fd 2 to /dev/null for the block (native code writes there, not to sys.stderr)."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


@contextlib.contextmanager
def _quiet(profiler: Any):
    """Enter and exit the profiler with fd 2 muted: kineto prints "USDT: ... profiler_start" and
    "profiler_stop" lines from every rank, with no setting to turn them off. Errors raised in
    between still reach stderr."""
    with _muted_stderr_fd():
        profiler.__enter__()
    exc_info: tuple = (None, None, None)
    try:
        yield profiler
    except BaseException as exc:
        exc_info = (type(exc), exc, exc.__traceback__)
        raise
    finally:
        with _muted_stderr_fd():
            profiler.__exit__(*exc_info)

def _dtype(name: str | None) -> torch.dtype | None:
    return getattr(torch, name) if name else None


def _fault_action(fault: Mapping[str, Any] | None, rank: int) -> Callable[[str], None] | None:
    """Test-only fault injection (see :func:`run_step`); None when no fault targets ``rank``."""
    if not fault or int(fault.get("rank", -1)) != rank:
        return None
    kind = fault.get("kind", "raise")
    at = fault.get("phase", "forward")
    if kind not in FAULT_KINDS:
        raise ValueError(f"fault kind {kind!r}: expected one of {FAULT_KINDS}")

    def act(phase: str) -> None:
        if phase != at:
            return
        if kind == "raise":
            raise RuntimeError(f"injected fault: rank {rank} raises at the start of {phase}")
        if kind == "hang":  # a stuck rank: its peers wait in their next collective
            while True:
                time.sleep(3600)
        os._exit(int(fault.get("code", 3)))  # kind == "exit": the process dies, no traceback

    return act


def _loss_fn(body: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    if body == "decoder_layers":
        return lambda out, inputs: out.float().pow(2).mean()

    def causal_lm_loss(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        vocab = logits.shape[-1]
        return F.cross_entropy(logits[:, :-1].float().reshape(-1, vocab), input_ids[:, 1:].reshape(-1))

    return causal_lm_loss


def _make_inputs(setup: RunSetup, config: Any, rank: int, world_size: int, dtype: torch.dtype, *, local_only: bool):
    """(this rank's inputs, input name, samples): samples r*B .. r*B+B-1 of the seeded global batch.

    ``samples`` is observed, not assumed: the global batch's rows that the local tensor's rows
    equal, in local order. ``local_only`` (simulated runs): make just a tensor of the local
    shape (values unused, no global batch), and ``samples`` is the assignment above.
    """
    B, L = setup.batch_per_rank, setup.seq_len
    n = B if local_only else world_size * B
    generator = torch.Generator().manual_seed(setup.seed + 1)
    if setup.model.body == "decoder_layers":
        batch = torch.randn(n, L, config.hidden_size, generator=generator).to(dtype)  # (W*B, L, d)
        name = "hidden_states"
    else:
        batch = torch.randint(0, config.vocab_size, (n, L), generator=generator)  # (W*B, L)
        name = "input_ids"
    if local_only:
        return batch, name, list(range(rank * B, rank * B + B))
    local = batch[rank * B : (rank + 1) * B].clone()
    return local, name, _rows_of(local, batch)


def _rows_of(local: torch.Tensor, batch: torch.Tensor) -> list[int]:
    """For each row of ``local``, the index of the equal row of ``batch`` (-1 if none)."""
    flat = batch.reshape(batch.shape[0], -1)
    found = []
    for row in local.reshape(local.shape[0], -1):
        hits = torch.nonzero((flat == row).all(dim=1)).flatten().tolist()
        found.append(hits[0] if hits else -1)
    return found


def _build(setup: RunSetup, config: Any, dtype: torch.dtype, device: torch.device, *, init: bool) -> nn.Module:
    cls = {"decoder_layers": qwen3.Qwen3DecoderStack, "causal_lm": qwen3.Qwen3ForCausalLM}.get(setup.model.body)
    if cls is None:
        raise ValueError(f"setup.model.body {setup.model.body!r}: expected 'decoder_layers' or 'causal_lm'")
    module = cls(config, device=device, dtype=dtype)
    if init:
        qwen3.init_weights(module, generator=torch.Generator().manual_seed(setup.seed))
    return module


@torch.no_grad()
def _init_local_shards(root: nn.Module, config: Any, seed: int, rank: int) -> None:
    """Fill the shards of a model materialized after ``fully_shard`` (meta-device init).

    Matrices (embedding, projections, lm_head) ~ N(0, initializer_range^2), vectors (RMSNorm
    weights) = 1, as ``model.init_weights``; but each rank draws its own shard from its own
    generator (``seed``, ``rank``), so the full weights are not those of ``init_weights``:
    used only when numerics are off, where no value is observed. RoPE's ``inv_freq`` buffer
    (not sharded) is recomputed.
    """
    generator = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    for p in root.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        if p.dim() >= 2:
            sample = torch.empty(local.shape, dtype=torch.float32).normal_(0.0, config.initializer_range, generator=generator)
            local.copy_(sample)
        else:
            local.fill_(1.0)
    for m in root.modules():
        if isinstance(m, qwen3.Qwen3RotaryEmbedding):
            m.reset_parameters()


def _units(setup: RunSetup, root: nn.Module) -> tuple[list[tuple[str, int, nn.Module]], str]:
    """The decoder layers as (FQN, index, module), in order; and their container's FQN."""
    prefix = "layers" if setup.model.body == "decoder_layers" else "model.layers"
    layers = root.get_submodule(prefix)
    return [(f"{prefix}.{i}", i, layer) for i, layer in enumerate(layers)], prefix


def _mp_policy(setup: RunSetup) -> MixedPrecisionPolicy:
    mp = setup.fsdp.mixed_precision
    if mp is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(
        param_dtype=_dtype(mp.param_dtype),
        reduce_dtype=_dtype(mp.reduce_dtype),
        output_dtype=_dtype(mp.output_dtype),
        cast_forward_inputs=mp.cast_forward_inputs,
    )


def _optimizer(setup: RunSetup, params) -> torch.optim.Optimizer:
    name = setup.optimizer.name.lower()
    if name == "sgd":
        return torch.optim.SGD(params, lr=setup.optimizer.lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=setup.optimizer.lr)
    raise ValueError(f"setup.optimizer.name {setup.optimizer.name!r}: expected 'sgd' or 'adamw'")


def _device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU model from /proc/cpuinfo (no subprocess), or the machine."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or "cpu"


def _in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


def run_step(
    setup: RunSetup,
    rank: int,
    world_size: int,
    device_type: str,
    *,
    simulated: bool = False,
    fault: Mapping[str, Any] | None = None,
    on_phase: Callable[[str], None] | None = None,
    trace_dir: str | None = None,
) -> dict[str, Any]:
    """Run and record one rank's step; the default process group must be initialized.

    Args:
        setup: what to run.
        rank: this rank (``dist.get_rank()``).
        world_size: ``setup.world_size`` (``dist.get_world_size()``).
        device_type: "cpu" or "cuda" (for CUDA, the current device is this rank's GPU).
        simulated: the fake process group is active: run under ``FakeTensorMode``, no numerics.
        fault: TESTS ONLY. ``{"rank": r, "phase": p, "kind": k}`` makes rank ``r`` misbehave at
            the start of phase ``p`` ("setup", "forward", "backward", "optimizer"): ``raise``
            an exception, ``hang`` forever (its peers block in their next collective), or
            ``exit`` the process at once (``os._exit``). Not a spec key.
        on_phase: called with each phase name as it starts (the launcher reports a hung rank's
            last phase).
        trace_dir: if given, an existing folder: the profiler's Chrome trace of the step
            (forward, backward, optimizer; FSDP:: labels and c10d ops) is written there as
            ``rank<rank>.json`` (``torch.autograd.profiler.profile.export_chrome_trace``).

    Returns:
        ``{"entry": <the rank's entry of the document>, "fsdp_units": [...],
        "environment": {torch_version, python_version, backend, device_type, device_name}}``.
    """
    t_start = time.perf_counter()
    if world_size != setup.world_size:
        raise ValueError(f"world size {world_size} but setup.mesh.shape {list(setup.mesh_shape)} needs {setup.world_size}")

    sync = torch.cuda.synchronize if device_type == "cuda" else None
    phases = Phases(sync=sync, on_enter=on_phase, before_enter=_fault_action(fault, rank))
    device = torch.device("cuda", torch.cuda.current_device()) if device_type == "cuda" else torch.device("cpu")
    dtype = _dtype(setup.param_dtype)
    config = qwen3.get_config(setup.model.config, **dict(setup.model.overrides))
    numerics_on = setup.numerics and not simulated

    # The mesh first, outside FakeTensorMode.
    mesh = init_device_mesh(device_type, tuple(setup.mesh_shape), mesh_dim_names=tuple(setup.mesh_dim_names))
    group_dims = {mesh.get_group(i).group_name: name for i, name in enumerate(setup.mesh_dim_names)}
    coords = mesh.get_coordinate()

    tensor_mode: contextlib.AbstractContextManager = contextlib.nullcontext()
    if simulated:
        from torch._subclasses.fake_tensor import FakeTensorMode

        tensor_mode = FakeTensorMode()

    loss_fn = _loss_fn(setup.model.body)
    with tensor_mode:
        # Without numerics, no rank needs the full weights: build on meta, shard, then
        # materialize only this rank's shards (FSDP2's meta-device init). A full model on
        # every rank at once would not fit here for Qwen3-0.6B on 8 ranks.
        meta_init = not simulated and not numerics_on
        with phases.phase("setup"):
            build_device = torch.device("meta") if meta_init else device
            root = _build(setup, config, dtype, build_device, init=not simulated and not meta_init)
            inputs, input_name, samples = _make_inputs(setup, config, rank, world_size, dtype, local_only=simulated)
            inputs = inputs.to(device)
        reference = None
        if numerics_on:
            with phases.phase("replica"):
                mp = setup.fsdp.mixed_precision
                replica_dtype = _dtype(mp.param_dtype) if mp is not None and mp.param_dtype else dtype
                reference = compute_reference(
                    root,
                    inputs,
                    world_size=world_size,
                    shard_count=setup.mesh_shape[-1],
                    shard_index=coords[-1],
                    loss_fn=loss_fn,
                    replica_dtype=replica_dtype,
                    all_reduce_sum=lambda t: dist.all_reduce(t, op=dist.ReduceOp.SUM),
                )

        layers, _ = _units(setup, root)
        unit_names = [name for name, _, _ in layers] + [""]
        all_params = [fqn for fqn, _ in root.named_parameters()]
        units = [
            Unit(name, "layer", i, module, tuple(f for f in all_params if param_owner(f, unit_names) == name))
            for name, i, module in layers
        ]
        units.append(Unit("", "root", None, root, tuple(f for f in all_params if param_owner(f, unit_names) == "")))

        recorder = CollectiveRecorder(lambda: phases.current, group_dims)
        # torch.autograd.profiler.profile is what torch.profiler.profile wraps; the wrapper's
        # start also touches torch._inductor (a 1.5 s import on first use in a process).
        profiler = torch.autograd.profiler.profile(use_cpu=True, use_kineto=True)
        steps: list[dict[str, Any]] = []

        def on_step(layer: int, name: str, t: torch.Tensor) -> None:
            steps.append({"layer": int(layer), "name": name, "shape": list(t.shape), "dtype": dtype_name(t.dtype)})

        with recorder:
            with phases.phase("setup"):
                policy = _mp_policy(setup)
                raf = setup.fsdp.reshard_after_forward
                root_raf = setup.fsdp.root_reshard_after_forward
                for _, _, layer in layers:
                    fully_shard(layer, mesh=mesh, reshard_after_forward=raf, mp_policy=policy)
                # root_reshard_after_forward None: pass nothing, as the document's
                # fully_shard(model, mesh=mesh); torch then does not reshard the root.
                root_kwargs = {} if root_raf is None else {"reshard_after_forward": root_raf}
                fully_shard(root, mesh=mesh, mp_policy=policy, **root_kwargs)
                if meta_init:
                    root.to_empty(device=device)  # FSDP keeps its DTensor params (and ties)
                    _init_local_shards(root, config, setup.seed, rank)
                optimizer = _optimizer(setup, root.parameters())
            # fully_shard has no FSDP:: labels to attribute to, and under the fake backend at
            # 4096 ranks it dispatches ~10^5 ops: the profiler starts after it.
            n_setup = len(recorder.records)
            params = param_table(root, unit_names)
            memory = MemoryRecorder(root, optimizer, {u.module: u.name for u in units}, inputs=(inputs,))
            with _quiet(profiler), memory:
                # After entering FSDPMemTracker: it re-registers FSDP's forward hooks.
                hooks = ParamStateHooks(units, is_backward=_in_backward).install()
                try:
                    with phases.phase("forward"):
                        with qwen3.observe_steps(root, on_step):
                            output = root(inputs)
                        loss = loss_fn(output, inputs)
                    with phases.phase("backward"):
                        loss.backward()
                    with phases.phase("optimizer"):
                        optimizer.step()
                    memory.mark_after_step()
                finally:
                    hooks.remove()
        t_observe = time.perf_counter()
        for record in recorder.records[:n_setup]:
            record.update(unit=None, fsdp_label=None, fsdp_labels=[], hook=None)
        collectives = recorder.records[:n_setup] + attribute(recorder.records[n_setup:], profiler_spans(profiler))
        # SGD and AdamW read .grad and leave it as backward left it: comparing after the
        # step is comparing the reduce-scattered gradients (kept out of the memory tracker).
        numerics = compare(reference, root, output, loss) if reference is not None else None
        memory_entries = memory.snapshots()

    if trace_dir is not None:
        profiler.export_chrome_trace(os.path.join(trace_dir, f"rank{rank}.json"))
    timings = dict(phases.timings_s)
    timings["observe"] = time.perf_counter() - t_observe
    timings["total"] = time.perf_counter() - t_start
    entry = {
        "rank": rank,
        "coords": [int(c) for c in coords],
        "input": {
            "name": input_name,
            "shape": list(inputs.shape),
            "dtype": dtype_name(inputs.dtype),
            "samples": samples,
        },
        "params": params,
        "param_states": hooks.states,
        "steps": steps,
        "collectives": collectives,
        "memory": memory_entries,
        "numerics": numerics,
        "timings_s": timings,
    }
    environment = {
        "torch_version": str(torch.__version__),
        "python_version": platform.python_version(),
        "backend": str(dist.get_backend()),
        "device_type": device_type,
        "device_name": _device_name(device),
    }
    return {"entry": entry, "fsdp_units": [u.describe() for u in units], "environment": environment}


def run_rank(setup: RunSetup, rank: int, world_size: int, device_type: str, **kwargs: Any) -> dict[str, Any]:
    """One rank's entry of the observation document (see :func:`run_step` for ``kwargs``)."""
    return run_step(setup, rank, world_size, device_type, **kwargs)["entry"]
