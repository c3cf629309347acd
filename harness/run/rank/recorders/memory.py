"""Memory per FSDP unit and state, from torch's ``FSDPMemTracker``.

``torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker(root, optimizer)`` is a
``TorchDispatchMode`` that classifies every live tensor storage (sharded/unsharded parameter,
gradient, activation, all-gather/reduce-scatter buffer, optimizer state, ...) and takes a
snapshot of the whole rank's bytes by category at each state of each FSDP unit
("Before Pre-Forward", "After Pre-Forward", ..., "After Post-Backward", "Peak Forward",
"Peak Backward"). A snapshot is the rank's total at that moment, not the unit's own share:
during layer 1's pre-backward, ``sharded_param`` counts every unit's shards while
``unsharded_param`` counts what is unsharded right then.

Verified on torch 2.13: it works on CPU with gloo and under ``FakeTensorMode`` with the fake
process group (sizes from the fake tensors' metadata), so the simulated backend uses it too.
Only units that own parameters are instrumented (a root that manages no parameter, as in the
``decoder_layers`` body, gets no snapshots of its own).

Beyond the tracker's per-unit states, :meth:`MemoryRecorder.snapshots` adds snapshots of
the whole rank under module ``""``: ``"After fully_shard"`` (current, as the tracker starts:
after every ``fully_shard`` and before the first step), ``"After Optimizer Step"`` (current,
after each ``optimizer.step()``: optimizer states exist), ``"After Zero Grad"`` (after each
``optimizer.zero_grad()`` between steps) and ``"Peak"`` (the tracker's peak over the run).

Every snapshot carries the ``step_index`` and ``microbatch`` it was taken in: the loop calls
:meth:`MemoryRecorder.mark_position` at the end of each microbatch, which keeps the per-unit
snapshots taken in it; where the tracker tracks the root (a root holding parameters) it then
resets the per-module stats (``reset_mod_stats``, torch's way to track another iteration:
without it the tracker refuses the root's second forward). ``Peak`` has neither; the
whole-rank snapshots of a step have its step index and no microbatch.

Limits of FSDPMemTracker (torch 2.13), seen through schedules: several forwards of a root
holding parameters before one backward raise NotImplementedError; a unit whose post-backward
runs (from the root's post-backward callback) without a forward since the tracker last saw it
raises KeyError (after a reset) or AttributeError ``_unsharded_param`` (never gathered yet).

Bytes with and without CUDA's rounding: on CUDA, FSDPMemTracker counts every storage rounded up
to the caching allocator's 512-B block (``_WeakRefInfo._calculate_mem_consumed`` in
``torch/distributed/_tools/mem_tracker.py``; ``_PYTORCH_MIN_ALLOCATE``), on the CPU its real
size. Every snapshot therefore carries two figures: ``bytes``, the tracker's own, and
``unrounded_bytes``, the same categories summed from the tracked storages' real sizes (numel of
the storage x element size), which is what the specs pin and what the ``memory`` check reads: it
is the same on every device. :class:`StorageBytesTracker` keeps the second figure beside the
first, through every update the tracker makes, so that the per-unit snapshots, the peaks and the
whole-rank snapshots carry both (on the CPU they are equal). A peak snapshot of each figure is
taken when that figure is highest, so on CUDA the two figures of a ``Peak`` may be two moments.

Note: the tracker re-registers FSDP's forward hooks on entry (pre-hook prepended, post-hook
appended), so any module hook that must run after FSDP's post-forward hook has to be
registered after entering it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Mapping

import torch
from torch import nn
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed._tools.mem_tracker import _UpdateType

from harness.contract.names import MEMORY_CATEGORIES

from .quiesce import settle_threads

__all__ = ["MemoryRecorder", "StorageBytesTracker", "CATEGORIES", "TRACKER_LIMIT_NOTE", "tracker_limit_note"]

# FSDPMemTracker's reference types (_FSDPRefType values) -> the schema's category names.
CATEGORIES = MEMORY_CATEGORIES


@dataclass(frozen=True)
class Unrounded:
    """The key, beside each ``torch.device`` of a tracker snapshot, of that device's bytes
    counted at the storages' real sizes (:class:`StorageBytesTracker`)."""

    device: str


class StorageBytesTracker(FSDPMemTracker):
    """``FSDPMemTracker`` whose snapshots also count every storage at its real size.

    Each update of the tracker's running snapshot (a storage added, freed, re-typed or resized:
    ``MemTracker._update_snap``) is applied twice: as torch applies it, under the storage's
    ``torch.device`` (rounded up to 512 B on CUDA), and with the storage's real bytes
    (``size x element_size``) under :class:`Unrounded` of that device. Every snapshot the tracker
    takes (a deep copy of the running one) and every peak it keeps (per key, by its total) so
    carries both. The bytes last counted for a storage ride on its ``_WeakRefInfo`` (needed when
    it is resized or freed)."""

    def _update_snap(
        self,
        u_type: _UpdateType,
        winfo: Any,
        old_mem_consumed: int | None = None,
        old_reftype: Any = None,
    ) -> None:
        super()._update_snap(u_type, winfo, old_mem_consumed, old_reftype)
        counted = getattr(winfo, "_unrounded_bytes", 0)
        real = winfo.size * winfo.element_size if u_type != _UpdateType.DEL else counted
        shadow = SimpleNamespace(device=Unrounded(str(winfo.device)), reftype=winfo.reftype, mem_consumed=real)
        super()._update_snap(u_type, shadow, counted if u_type == _UpdateType.SIZE else None, old_reftype)
        winfo._unrounded_bytes = real


def _bytes(snapshot: Mapping[Any, Mapping[Any, int]], unrounded: bool = False) -> dict[str, int]:
    """Sum a ``{device: {reftype: bytes}}`` snapshot over devices, with schema category names:
    the tracker's own bytes (keys ``torch.device``), or with ``unrounded`` the storages' real
    bytes (keys :class:`Unrounded`)."""
    out = {name: 0 for name in CATEGORIES.values()}
    for device, per_device in snapshot.items():
        if isinstance(device, Unrounded) != unrounded:
            continue
        for reftype, value in per_device.items():
            key = getattr(reftype, "value", reftype)
            name = CATEGORIES.get(key, str(key).lower().replace(" ", "_"))
            out[name] = out.get(name, 0) + int(value)
    return out


def _figures(snapshot: Mapping[Any, Mapping[Any, int]]) -> dict[str, dict[str, int]]:
    """A schema ``memory`` entry's two figures of ``snapshot``: ``bytes`` (the tracker's) and
    ``unrounded_bytes`` (the storages' real sizes)."""
    return {"bytes": _bytes(snapshot), "unrounded_bytes": _bytes(snapshot, unrounded=True)}


TRACKER_LIMIT_NOTE = (
    "FSDPMemTracker cannot track this schedule (a known limit of torch's tracker, see docs/known-limits.md); "
    "setup track_memory: false avoids it"
)
"""Added to an exception raised inside FSDPMemTracker (its one-line error says how to run the spec)."""

_TRACKER_FILES = ("fsdp2_mem_tracker.py", "mem_tracker.py")


def tracker_limit_note(exc: BaseException) -> str | None:
    """:data:`TRACKER_LIMIT_NOTE` when ``exc`` was raised inside FSDPMemTracker's own code
    (``torch/distributed/_tools/fsdp2_mem_tracker.py`` or ``mem_tracker.py``: the schedules of
    the module docstring's limits), else None."""
    tb = exc.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if "/torch/distributed/_tools/" in path and path.endswith(_TRACKER_FILES):
            return TRACKER_LIMIT_NOTE
        tb = tb.tb_next
    return None


def _settle_before_snapshots(tracker: FSDPMemTracker) -> None:
    """Have every snapshot of ``tracker`` (its own, in FSDP's hooks, and ours) taken at the settle
    point of :mod:`.quiesce`: a buffer whose last reference the backend's worker thread drops is
    then counted as freed in every run, not in some. FSDPMemTracker's hooks call
    ``self.get_tracker_snapshot()``; the instance's attribute is what they find."""
    take = tracker.get_tracker_snapshot

    def settled(type: str = "current") -> dict:
        settle_threads()
        return take(type)

    tracker.get_tracker_snapshot = settled


class MemoryRecorder:
    """Wraps ``FSDPMemTracker`` and turns its snapshots into the schema's ``memory`` list.

    Args:
        root: the root FSDP module.
        optimizer: the optimizer stepped in the run (its states are tracked as ``optstate``).
        unit_names: module -> unit name (module FQN relative to the root, ``""`` for the root).
        inputs: the step's input tensors (tracked as ``inputs``).
    """

    def __init__(
        self,
        root: nn.Module,
        optimizer: torch.optim.Optimizer,
        unit_names: Mapping[nn.Module, str],
        inputs: tuple[torch.Tensor, ...] = (),
    ) -> None:
        self._unit_names = {id(m): name for m, name in unit_names.items()}
        self._order = list(dict.fromkeys(unit_names.values()))
        self.tracker = StorageBytesTracker(root, optimizer)
        _settle_before_snapshots(self.tracker)
        if inputs:
            self.tracker.track_inputs(inputs)
        self._whole: list[dict[str, Any]] = []  # whole-rank snapshots in order
        self._units: list[dict[str, Any]] = []  # per-unit snapshots of the microbatches so far
        self._taken: dict[tuple[int, str], int] = {}  # (module id, state) -> snapshots already kept
        self._root_id = id(root)

    def __enter__(self) -> "MemoryRecorder":
        self.tracker.__enter__()
        # Entered after fully_shard and before the first step: what the rank holds then.
        self.mark_state("After fully_shard", None)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.tracker.__exit__(*exc)

    def mark_after_step(self, step_index: int = 0) -> None:
        """Take the whole-rank snapshot that follows ``optimizer.step()``."""
        self.mark_state("After Optimizer Step", step_index)

    def mark_state(self, state: str, step_index: int | None) -> None:
        """Take a whole-rank snapshot now, recorded under module ``""`` as ``state``."""
        self._whole.append(
            {
                "module": "",
                "state": state,
                "step_index": step_index,
                "microbatch": None,
                **_figures(self.tracker.get_tracker_snapshot("current")),
            }
        )

    def mark_position(self, step_index: int, microbatch: int) -> None:
        """A microbatch ended: keep the per-unit snapshots taken since the last mark, tagged with
        its step index and microbatch. If the tracker tracks the root (a root that holds
        parameters), clear its per-module stats (``reset_mod_stats``): it refuses the root's
        next forward otherwise. Without that need the stats are kept, because the tracker's
        post-backward hook fails on a unit with no stats (one that did not run forward since the
        reset)."""
        self._units.extend(self._unit_snapshots(step_index, microbatch))
        if self._root_id in {id(m) for m in self.tracker.memory_tracking}:
            self.tracker.reset_mod_stats()
            self._taken.clear()

    def _unit_snapshots(self, step_index: int | None, microbatch: int | None) -> list[dict[str, Any]]:
        """The snapshots taken since the last call, per unit in ``fully_shard`` order."""
        per_unit: dict[str, list[dict[str, Any]]] = {}
        for module, stats in self.tracker.memory_tracking.items():
            name = self._unit_names.get(id(module))
            if name is None:  # a module FSDPMemTracker tracks that is not an FSDP unit
                continue
            for state, snaps in stats.snapshots.items():
                label = str(getattr(state, "value", state))
                key = (id(module), label)
                for snap in snaps[self._taken.get(key, 0) :]:
                    per_unit.setdefault(name, []).append(
                        {
                            "module": name,
                            "state": label,
                            "step_index": step_index,
                            "microbatch": microbatch,
                            **_figures(snap),
                        }
                    )
                self._taken[key] = len(snaps)
        return [entry for name in self._order for entry in per_unit.get(name, [])]

    def snapshots(self) -> list[dict[str, Any]]:
        """The schema's ``memory`` entries: per microbatch, units in ``fully_shard`` order and
        states in the tracker's order; then the whole-rank snapshots under module ``""``."""
        out = self._units + self._unit_snapshots(None, None)
        out += self._whole
        out.append(
            {
                "module": "",
                "state": "Peak",
                "step_index": None,
                "microbatch": None,
                **_figures(self.tracker.get_tracker_snapshot("peak")),
            }
        )
        return out
