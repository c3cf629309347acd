"""Memory per FSDP unit and state, from torch's ``FSDPMemTracker``.

Each snapshot is the whole rank's bytes by category, as ``bytes`` (the tracker's, rounded to 512 B
on CUDA) and ``unrounded_bytes`` (real storage sizes, what specs pin). Its use, what was verified
and its limits: docs/known-limits.md, "The memory tracker".
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Mapping

import torch
from torch import nn
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed._tools.mem_tracker import _UpdateType, _WeakRefInfo

from harness.contract.names import MEMORY_CATEGORIES

from .quiesce import settle_threads

__all__ = ["MemoryRecorder", "StorageBytesTracker", "CATEGORIES", "TRACKER_LIMIT_NOTE", "tracker_limit_note"]

# FSDPMemTracker's reference types (_FSDPRefType values) -> the schema's category names.
CATEGORIES = MEMORY_CATEGORIES


@dataclass(frozen=True)
class Unrounded:
    """Key, beside a ``torch.device`` where the tracker rounds, of that device's bytes at the storages' real sizes."""

    device: str


class StorageBytesTracker(FSDPMemTracker):
    """``FSDPMemTracker`` that applies each update (``MemTracker._update_snap``) of a storage on a
    device where torch rounds (CUDA) twice: as torch does, and at the storage's real size under
    :class:`Unrounded`. Where torch counts real sizes (the CPU) one update serves both figures."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rounding: dict[torch.device, bool] = {}

    def _rounds(self, device: torch.device) -> bool:
        """Whether the tracker's count of a 1-byte storage on ``device`` is not 1 byte (torch's
        ``_WeakRefInfo._calculate_mem_consumed``, or a test's emulation of it)."""
        if device not in self._rounding:
            probe = SimpleNamespace(size=1, element_size=1, device=device)
            self._rounding[device] = _WeakRefInfo._calculate_mem_consumed(probe) != 1
        return self._rounding[device]

    def _update_snap(
        self,
        u_type: _UpdateType,
        winfo: Any,
        old_mem_consumed: int | None = None,
        old_reftype: Any = None,
    ) -> None:
        super()._update_snap(u_type, winfo, old_mem_consumed, old_reftype)
        if not self._rounds(winfo.device):
            return
        counted = getattr(winfo, "_unrounded_bytes", 0)
        real = winfo.size * winfo.element_size if u_type != _UpdateType.DEL else counted
        shadow = SimpleNamespace(device=Unrounded(str(winfo.device)), reftype=winfo.reftype, mem_consumed=real)
        super()._update_snap(u_type, shadow, counted if u_type == _UpdateType.SIZE else None, old_reftype)
        winfo._unrounded_bytes = real


def _bytes(snapshot: Mapping[Any, Mapping[Any, int]], unrounded: bool = False) -> dict[str, int]:
    """Sum a ``{device: {reftype: bytes}}`` snapshot by schema category: rounded, or ``unrounded``."""
    out = {name: 0 for name in CATEGORIES.values()}
    shadowed = {device.device for device in snapshot if isinstance(device, Unrounded)}
    for device, per_device in snapshot.items():
        if isinstance(device, Unrounded):
            if not unrounded:
                continue
        elif unrounded and str(device) in shadowed:  # its real bytes are under Unrounded
            continue
        for reftype, value in per_device.items():
            key = getattr(reftype, "value", reftype)
            name = CATEGORIES.get(key, str(key).lower().replace(" ", "_"))
            out[name] = out.get(name, 0) + int(value)
    return out


def _figures(snapshot: Mapping[Any, Mapping[Any, int]]) -> dict[str, dict[str, int]]:
    """The ``bytes`` and ``unrounded_bytes`` of a schema ``memory`` entry."""
    return {"bytes": _bytes(snapshot), "unrounded_bytes": _bytes(snapshot, unrounded=True)}


TRACKER_LIMIT_NOTE = (
    "FSDPMemTracker cannot track this schedule (a known limit of torch's tracker, see docs/known-limits.md); "
    "setup track_memory: false avoids it"
)
"""Added to an exception raised inside FSDPMemTracker (its one-line error says how to run the spec)."""

_TRACKER_FILES = ("fsdp2_mem_tracker.py", "mem_tracker.py")


def tracker_limit_note(exc: BaseException) -> str | None:
    """:data:`TRACKER_LIMIT_NOTE` when ``exc`` was raised inside FSDPMemTracker's own files
    (``torch/distributed/_tools/``), else None."""
    tb = exc.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if "/torch/distributed/_tools/" in path and path.endswith(_TRACKER_FILES):
            return TRACKER_LIMIT_NOTE
        tb = tb.tb_next
    return None


def _settle_before_snapshots(tracker: FSDPMemTracker) -> None:
    """Have every snapshot of ``tracker`` taken at :mod:`.quiesce`'s settle point."""
    take = tracker.get_tracker_snapshot

    def settled(type: str = "current") -> dict:
        settle_threads()
        return take(type)

    tracker.get_tracker_snapshot = settled


class MemoryRecorder:
    """Wraps ``FSDPMemTracker`` and turns its snapshots into the schema's ``memory`` list;
    ``unit_names``: module -> unit name (``""`` for the root)."""

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
        """A microbatch ended: keep its per-unit snapshots; where the tracker tracks the root, reset
        its stats (it refuses the root's next forward otherwise)."""
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
        """The schema's ``memory`` entries: per microbatch, units in ``fully_shard`` order; then
        whole-rank ones."""
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
