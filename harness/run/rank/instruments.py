"""The rank's recorders, owned by one object and entered in the one order that works.

:class:`Instruments` holds the collective recorder (from before ``fully_shard`` on), the profiler
(FSDP's labels attribute each collective; around the steps only), the memory tracker and the other
recorders of ``harness.run.rank.recorders``, each under one named instrument (:data:`INSTRUMENTS`):
only those the setup names run. :meth:`Instruments.pieces` gives the rank entry's parts
(``harness/contract/observation.schema.json``, ``$defs/rank``).
"""

from __future__ import annotations

import bisect
import contextlib
import os
from typing import Any, Callable, ContextManager, Iterator, Mapping, Sequence

import torch
from torch import nn

import model as qwen3
from harness.contract.instrument_names import INSTRUMENTS, chosen_instruments
from harness.run.rank.error_hints import error_hint
from harness.run.rank.recorders.all_gather_extensions import AllGatherExtensions
from harness.run.rank.recorders.collectives import (
    CollectiveRecorder,
    attribute,
    dtype_name,
    profiler_spans,
    resolve_mesh_dims,
)
from harness.run.rank.recorders.events import ShardStateProbe, events_from_profiler, phase_span
from harness.run.rank.recorders.experts import ExpertRecorder
from harness.run.rank.recorders.grads import grad_records, unit_dtype_records
from harness.run.rank.recorders.memory import MemoryRecorder, tracker_limit_note
from harness.run.rank.recorders.param_states import FullyShardCalls, ParamStateHooks
from harness.run.rank.recorders.params import Unit, buffer_table, param_table
from harness.run.rank.recorders.phases import Phases

__all__ = ["INSTRUMENTS", "Instruments", "profiler_options", "trace_device_activity"]


@contextlib.contextmanager
def _muted_stderr_fd() -> Iterator[None]:
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


def profiler_options(device_activity: str | None) -> dict[str, Any]:
    """``torch.autograd.profiler.profile`` keyword arguments: the CPU activity (FSDP's labels, c10d ops)
    always, the device's (kernels, NCCL) only for ``device_activity``, as collecting it costs."""
    options: dict[str, Any] = {"use_cpu": True, "use_kineto": True}
    if device_activity is not None:
        options["use_device"] = device_activity
    return options


def trace_device_activity(tracing: bool, device_type: str) -> str | None:
    """The device whose activity the profiler keeps: "cuda" for a ``--trace`` of a CUDA rank, else None."""
    return device_type if tracing and device_type == "cuda" else None


@contextlib.contextmanager
def _quiet(profiler: Any) -> Iterator[Any]:
    """Enter and exit the profiler with fd 2 muted: kineto's "USDT" start/stop lines have no switch."""
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


def _in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


class Instruments:
    """Every recorder of one rank's run.

    ``group_dims``: process group name -> mesh dim name, or a tuple of the dims sharing that group.
    ``collective_log``: a ``harness.run.launch.hang.RankProgress`` (hang diagnosis) or None.
    ``instruments``: the names to run, None: all; ValueError for an unknown one."""

    def __init__(
        self,
        phases: Phases,
        group_dims: Mapping[str, Any],
        collective_log: Any = None,
        *,
        track_memory: bool = True,
        device_activity: str | None = None,
        instruments: frozenset[str] | None = None,
    ) -> None:
        self.on = chosen_instruments(instruments)
        self.collectives = CollectiveRecorder(lambda: phases.current, group_dims, collective_log)
        self.track_memory = track_memory and "memory" in self.on
        # torch.autograd.profiler.profile is what torch.profiler.profile wraps; the wrapper's
        # start also touches torch._inductor (a 1.5 s import on first use in a process).
        # Its FSDP labels attribute the collectives and give the events: off where neither is on.
        self.profiler = (
            torch.autograd.profiler.profile(**profiler_options(device_activity))
            if self.on & {"collectives", "events"}
            else None
        )
        self.steps: list[dict[str, Any]] = []
        self._n_setup: int | None = None
        self._params: list[dict[str, Any]] = []
        self._buffers: list[dict[str, Any]] = []
        self._memory: MemoryRecorder | None = None
        self._hooks: ParamStateHooks | None = None
        self.fully_shard_calls = FullyShardCalls()
        self._phases = phases
        self._probe: ShardStateProbe | None = None
        self._updates: Any = None
        self._position: tuple[int | None, int | None] = (0, 0)
        self._marks: list[tuple[int, int | None, int | None]] = []  # (first collective index, step, microbatch)
        self.grad_norms: list[dict[str, Any]] = []
        self.grads: list[dict[str, Any]] = []  # per step and parameter (recorders/grads.py)
        self.unit_dtypes: list[dict[str, Any]] = []  # per forward phase and unit
        self.forward_inputs: list[dict[str, Any]] = []  # what the root's forward received, per forward
        self._root: nn.Module | None = None
        self._units: list[Unit] = []
        self._experts: ExpertRecorder | None = None  # a MoE model's experts (recorders/experts.py)
        self._extensions: AllGatherExtensions | None = None  # parameters' all-gather extensions

    def __enter__(self) -> "Instruments":
        """Start recording collectives; also with ``collectives`` off where the run reports hang progress."""
        if self._recording_collectives:
            self.collectives.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._recording_collectives:
            self.collectives.__exit__(*exc)

    @property
    def _recording_collectives(self) -> bool:
        return "collectives" in self.on or self.collectives.progress is not None

    def before_fully_shard(self, root: nn.Module, *, device: str | None = None) -> None:
        """The parameters before the first ``fully_shard`` (``device``: :meth:`FullyShardCalls.before`)."""
        if "fully_shard_calls" in self.on:
            self.fully_shard_calls.before(root, device=device)

    def after_fully_shard(self, unit: str, root: nn.Module) -> None:
        """The parameters that ``fully_shard`` of ``unit`` changed."""
        if "fully_shard_calls" in self.on:
            self.fully_shard_calls.after(unit, root)

    @contextlib.contextmanager
    def observing(
        self,
        root: nn.Module,
        optimizer: torch.optim.Optimizer,
        units: Sequence[Unit],
        *,
        inputs: tuple[torch.Tensor, ...] = (),
        updates: Any = None,
    ) -> Iterator["Instruments"]:
        """Observe the steps; enter after ``fully_shard`` and the optimizer exist. Takes the parameter
        tables, then starts the profiler, memory tracker, parameter-state hooks and shard-state probe, in
        that order. ``updates``: a ``ParamUpdates``, or None."""
        self._updates = updates
        self._root, self._units = root, list(units)
        # fully_shard has no FSDP:: labels to attribute to, and under the fake backend at
        # 4096 ranks it dispatches ~10^5 ops: the profiler starts after it. The collectives
        # recorded so far are setup's.
        self._n_setup = len(self.collectives.records)
        if "params" in self.on:
            self._params = param_table(root, {fqn: u.name for u in units for fqn in u.params})
            self._buffers = buffer_table(root)
        self._experts = ExpertRecorder(root) if "experts" in self.on else None
        modules = {m: u.name for u in units for m in (u.modules or (u.module,))}
        self._memory = MemoryRecorder(root, optimizer, modules, inputs=inputs) if self.track_memory else None
        with (
            _quiet(self.profiler) if self.profiler is not None else contextlib.nullcontext(),
            self._memory if self._memory is not None else contextlib.nullcontext(),
        ):
            # After entering FSDPMemTracker: it re-registers FSDP's forward hooks, and these
            # hooks must run after FSDP's (pre-forward prepended, post-forward appended).
            if "param_states" in self.on:
                self._hooks = ParamStateHooks(
                    list(units), is_backward=_in_backward, position=lambda: self._position
                ).install()
            if "events" in self.on:
                self._probe = ShardStateProbe(list(units)).install()
            if "collectives" in self.on:
                managed = {fqn: root.get_parameter(fqn) for u in units for fqn in u.params}
                self._extensions = AllGatherExtensions(managed, lambda: (*self._position, self._phases.current))
            try:
                yield self
            finally:
                for installed in (self._probe, self._hooks, self._extensions):
                    if installed is not None:
                        installed.remove()
                self._root = None  # what grads/unit_dtypes read, let go with the steps
                self._units = []

    @contextlib.contextmanager
    def phase(self, name: str, step_index: int, microbatch: int | None = None) -> Iterator[None]:
        """Run the block as phase ``name`` of step ``step_index`` and ``microbatch`` (None for the step's
        own phases), which every record made in it carries; the shard-state probe looks at its end."""
        self._position = (step_index, microbatch)
        self._marks.append((len(self.collectives.records), step_index, microbatch))
        self.collectives.settle()  # the last phase's collectives were waited on: let go of their works
        try:
            with self._phases.phase(name), phase_span(name, step_index, microbatch):
                yield
                if self._probe is not None:
                    self._probe.probe()
        except Exception as exc:  # say where in the schedule it failed (and how to avoid a tracker limit)
            where = f"in phase {name} of step {step_index}" + (
                f", microbatch {microbatch}" if microbatch is not None else ""
            )
            limit = tracker_limit_note(exc) if self.track_memory else None
            for note in (limit, error_hint(exc), where):
                if note is not None and note not in getattr(exc, "__notes__", ()):
                    exc.add_note(note)
            raise

    def begin_step(self, step_index: int) -> None:
        """A step starts: the parameter-update tracker keeps the shards as they are now."""
        if self._updates is not None:
            self._updates.before_step(step_index)

    def end_microbatch(self) -> None:
        """A microbatch ended: memory snapshots so far belong to it."""
        if self._memory is not None and self._position[1] is not None:
            self._memory.mark_position(*self._position)
        if self._experts is not None and self._experts.active:
            self._experts.after_backward(*self._position)

    def after_zero_grad(self, step_index: int) -> None:
        """The memory snapshot and each unit's parameter state after ``optimizer.zero_grad()``."""
        if self._memory is not None:
            self._memory.mark_state("After Zero Grad", step_index)
        if self._hooks is not None:
            self._hooks.snapshot_all("after_zero_grad")

    def after_reset_iter_state(self) -> None:
        """Each unit's parameter state once ``reset_iter_state()`` recovered an aborted step."""
        if self._hooks is not None:
            self._hooks.snapshot_all("after_reset_iter_state")

    def after_backward(self) -> None:
        """Each unit's ``after_backward`` parameter state, once ``loss.backward()`` returned."""
        if self._hooks is not None:
            self._hooks.snapshot_all("after_backward")

    def record_grad_norm(
        self, step_index: int, norm: torch.Tensor, clip: Any, *, clip_coef: float | None = None
    ) -> None:
        """Record what ``clip_grad_norm_`` returned (``clip_coef``: the factor it scaled this rank's grads
        by), read locally: ``full_tensor()`` would issue an all-reduce recorded as the run's. A ``Partial``
        norm's ``value`` stays None; the document's assembly combines ``local_value``."""
        if "grads" not in self.on:
            return
        is_dtensor = hasattr(norm, "to_local")
        placements = [repr(pl) for pl in norm.placements] if is_dtensor else []
        try:
            local = float(norm.to_local() if is_dtensor else norm)
        except Exception:  # FakeTensorMode (the fake backend): no value to read
            local = None
        partial = any(pl.startswith("Partial(") for pl in placements)
        self.grad_norms.append(
            {
                "step_index": step_index,
                "max_norm": float(clip.max_norm),
                "norm_type": float(clip.norm_type),
                "value": None if partial else local,
                "local_value": local,
                "is_dtensor": is_dtensor,
                "placements": placements,
                "dtype": dtype_name(norm.dtype),
                "reference": None,
                "clip_coef": clip_coef,
                "reference_clip_coef": None,
                "shard_reference": None,
            }
        )

    def end_step(self, step_index: int) -> None:
        """A step ended: parameter updates compared with the step's start; gradient dtypes recorded."""
        if self._updates is not None:
            self._updates.after_step(step_index)
        if self._root is not None and "grads" in self.on:
            self.grads += grad_records(self._root, step_index)

    def after_forward(self, step_index: int, microbatch: int | None) -> None:
        """Each unit's resolved dtypes after a forward (FSDP's lazy init has run)."""
        if "grads" in self.on:
            self.unit_dtypes += unit_dtype_records(self._units, step_index, microbatch)

    def forward_steps(self, root: nn.Module) -> ContextManager[Any]:
        """Records the walkthrough's Steps 1-10 around a forward, where ``steps`` or ``experts`` is on."""
        if "steps" not in self.on and (self._experts is None or not self._experts.active):
            return contextlib.nullcontext()
        return qwen3.observe_steps(root, self._on_step)

    def forward_input_recorder(self, forward: int) -> Callable[[dict[str, Any]], None] | None:
        """Where ``steps`` is on: a callback keeping what the root's forward ``forward`` received
        (``harness.run.rank.forward_input.call_root``) at the current step and microbatch."""
        if "steps" not in self.on:
            return None
        step_index, microbatch = self._position

        def keep(received: dict[str, Any]) -> None:
            self.forward_inputs.append(
                {"step_index": step_index, "microbatch": microbatch, "forward": forward, **received}
            )

        return keep

    def _on_step(self, layer: int, name: str, t: torch.Tensor) -> None:
        step_index, microbatch = self._position
        if "steps" in self.on:
            self.steps.append(
                {
                    "layer": int(layer),
                    "name": name,
                    "shape": list(t.shape),
                    "dtype": dtype_name(t.dtype),
                    "step_index": step_index,
                    "microbatch": microbatch,
                }
            )
        if self._experts is not None and self._experts.active:
            self._experts.on_step(layer, name, t, step_index, microbatch)

    def after_optimizer_step(self, step_index: int = 0) -> None:
        """Take the whole-rank memory snapshot that follows ``optimizer.step()``."""
        if self._n_setup is None:
            raise RuntimeError("after_optimizer_step outside Instruments.observing")
        if self._memory is not None:
            self._memory.mark_after_step(step_index)
        if self._hooks is not None:
            self._hooks.snapshot_all("after_optimizer_step")

    def pieces(self) -> dict[str, Any]:
        """The rank entry's recorded parts; call after leaving :meth:`observing` (the profiler has stopped).
        RuntimeError if it was never entered; ``AttributionError`` where collectives and profiler disagree."""
        if self._n_setup is None:
            raise RuntimeError("Instruments.pieces before Instruments.observing")
        records = self.collectives.records
        setup = records[: self._n_setup]
        for record in setup:
            record.update(unit=None, fsdp_label=None, fsdp_labels=[], hook=None, step_index=None, microbatch=None)
        starts = [first for first, _, _ in self._marks]  # the phase each collective was issued in
        for record in records[self._n_setup :]:
            i = bisect.bisect_right(starts, record["index"]) - 1
            _, step_index, microbatch = self._marks[i] if i >= 0 else (None, None, None)
            record.update(step_index=step_index, microbatch=microbatch)
        collectives = (
            resolve_mesh_dims(setup + attribute(records[self._n_setup :], profiler_spans(self.profiler)))
            if "collectives" in self.on
            else []
        )
        pieces = {
            "params": self._params,
            "buffers": self._buffers,
            "param_states": self._hooks.states if self._hooks is not None else [],
            "fully_shard_calls": self.fully_shard_calls.record,
            "steps": self.steps,
            "forward_inputs": self.forward_inputs,
            "collectives": collectives,
            "memory": self._memory.snapshots() if self._memory is not None else [],
            "events": events_from_profiler(self.profiler) if "events" in self.on else [],
            "grad_norms": self.grad_norms,
            "grads": self.grads,
            "unit_dtypes": self.unit_dtypes,
        }
        if self._extensions is not None and self._extensions.active:
            pieces["all_gather_extensions"] = self._extensions.records
        if self._updates is not None and "updates" in self.on:
            pieces["param_updates"] = self._updates.records
        if self._experts is not None and self._experts.active:
            pieces["experts"] = self._experts.piece()
        return pieces
