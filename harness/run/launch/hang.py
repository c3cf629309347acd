"""Which collective each rank last entered and completed, and the verdict on a hang.

Each rank's :class:`~harness.run.rank.recorders.collectives.CollectiveRecorder` reports a
collective when issued ("entered": sequence number, op, FSDP unit, phase), when its ``Work``
completes ("completed"), and the oldest still open ("oldest_open": on NCCL the rank's thread runs
ahead of the GPU). Local ranks write to a shared :class:`ProgressBoard`, torchrun's ranks to the
store (:class:`StoreProgress`); :func:`diagnose` says who is stuck where, e.g.

    rank 2 never entered all_gather #2 (layers.1, backward); ranks 0, 1, 3 wait in it

Sequence numbers are the observation's collective ``index``. NCCL's own flight recorder:
``harness.run.launch.flight_recorder``."""

from __future__ import annotations

import json
from typing import Any, Mapping

__all__ = [
    "RECORD_KEYS",
    "SLOT_BYTES",
    "ProgressBoard",
    "RankProgress",
    "StoreProgress",
    "read_store",
    "diagnose",
    "describe",
    "per_rank_lines",
]

SLOT_BYTES = 256
"""Bytes of one JSON record (entered, completed or oldest open) in a rank's slot."""

RECORD_KEYS: tuple[str, ...] = ("entered", "completed", "oldest_open")
"""A rank's records, in slot order: the last collective entered, the furthest completed, and the
oldest entered and not completed (None when every one it entered completed)."""


class RankProgress:
    """One rank's writer into the board: ``entered``, ``completed`` and ``oldest_open`` (a record or None).
    A record ``{"seq", "op", "unit", "phase"}`` is written as JSON, cut to :data:`SLOT_BYTES`."""

    def __init__(self, array: Any, rank: int) -> None:
        self._array, self._base = array, rank * len(RECORD_KEYS) * SLOT_BYTES

    def _write(self, offset: int, record: Mapping[str, Any] | None) -> None:
        data = b"" if record is None else json.dumps(dict(record), separators=(",", ":")).encode()[: SLOT_BYTES - 1]
        start = self._base + offset
        self._array[start : start + SLOT_BYTES] = data + b"\0" * (SLOT_BYTES - len(data))

    def entered(self, record: Mapping[str, Any]) -> None:
        self._write(0, record)

    def completed(self, record: Mapping[str, Any]) -> None:
        self._write(SLOT_BYTES, record)

    def oldest_open(self, record: Mapping[str, Any] | None) -> None:
        self._write(2 * SLOT_BYTES, record)


class ProgressBoard:
    """Shared memory with three JSON records per rank (:data:`RECORD_KEYS`), written by the ranks,
    read by the launcher; ``ctx`` is the multiprocessing context the ranks start from."""

    def __init__(self, ctx: Any, world_size: int) -> None:
        self.world_size = world_size
        self.array = ctx.Array("c", world_size * len(RECORD_KEYS) * SLOT_BYTES, lock=False)

    def writer(self, rank: int) -> RankProgress:
        return RankProgress(self.array, rank)

    def read(self) -> dict[int, dict[str, Any]]:
        """``{rank: {"entered": ..., "completed": ..., "oldest_open": ...}}``, each a record or None."""
        out = {}
        raw = bytes(self.array[:])
        for rank in range(self.world_size):
            records = {}
            for i, key in enumerate(RECORD_KEYS):
                start = (rank * len(RECORD_KEYS) + i) * SLOT_BYTES
                text = raw[start : start + SLOT_BYTES].split(b"\0", 1)[0]
                try:
                    records[key] = json.loads(text) if text else None
                except ValueError:  # caught mid-write
                    records[key] = None
            out[rank] = records
        return out


class StoreProgress:
    """One rank's writer into a c10d store (torchrun's ranks share no memory): keys
    ``fsdp2-harness/progress/<rank>/entered``, ``.../completed``, ``.../oldest_open`` hold the JSON records."""

    def __init__(self, store: Any, rank: int) -> None:
        self.store, self.rank = store, rank

    def entered(self, record: Mapping[str, Any]) -> None:
        self.store.set(f"{STORE_PREFIX}/{self.rank}/entered", json.dumps(dict(record)))

    def completed(self, record: Mapping[str, Any]) -> None:
        self.store.set(f"{STORE_PREFIX}/{self.rank}/completed", json.dumps(dict(record)))

    def oldest_open(self, record: Mapping[str, Any] | None) -> None:
        self.store.set(f"{STORE_PREFIX}/{self.rank}/oldest_open", json.dumps(None if record is None else dict(record)))


STORE_PREFIX = "fsdp2-harness/progress"


def read_store(store: Any, world_size: int) -> dict[int, dict[str, Any]]:
    """Every rank's records from the store (:class:`StoreProgress`); a key never written is None."""
    out = {}
    for rank in range(world_size):
        records = {}
        for key in RECORD_KEYS:
            name = f"{STORE_PREFIX}/{rank}/{key}"
            try:
                records[key] = json.loads(store.get(name)) if store.check([name]) else None
            except Exception:  # the store is gone or the record unreadable
                records[key] = None
        out[rank] = records
    return out


def _unit(record: Mapping[str, Any]) -> str:
    unit = record.get("unit")
    return "no unit" if unit is None else (unit or "root")


def describe(record: Mapping[str, Any] | None) -> str:
    """``all_gather #3 (layers.1, forward)``; ``none`` for no record."""
    if not record:
        return "none"
    return f"{record['op']} #{record['seq']} ({_unit(record)}, {record['phase']})"


def _ranks(ranks: list[int]) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _members(group: Any) -> set[int] | None:
    """The global ranks of a ``[first, stride, size]`` group span, or None when unknown."""
    if not (isinstance(group, list) and len(group) == 3 and all(isinstance(x, int) for x in group)):
        return None
    first, stride, size = group
    return {first + i * stride for i in range(size)}


def diagnose(progress: Mapping[int, Mapping[str, Any]], phases: Mapping[int, str] | None = None) -> str:
    """The verdict on a hang, one sentence, from ``progress`` (:meth:`ProgressBoard.read`) and each
    rank's phase when stopped (``phases``).

    The world is stuck at the oldest collective a rank entered and did not complete, else the
    furthest any rank entered; ranks that never entered it are named as stuck before it, the
    others as waiting in it."""
    phases = phases or {}
    entered = {r: (p.get("entered") or {}).get("seq", -1) for r, p in progress.items()}
    completed = {r: (p.get("completed") or {}).get("seq", -1) for r, p in progress.items()}
    open_ = {r: p["oldest_open"] for r, p in progress.items() if p.get("oldest_open")}
    frontier = max(entered.values(), default=-1)
    if frontier < 0:
        where = ", ".join(f"rank {r} in {phases.get(r, 'an unknown phase')}" for r in sorted(progress))
        return f"no rank entered a collective ({where})"
    if open_:
        frontier = min(record["seq"] for record in open_.values())
        target = next(record for _, record in sorted(open_.items()) if record["seq"] == frontier)
        # Past the frontier, a rank's oldest open collective says whether it completed the frontier.
        completed = {
            r: frontier - 1 if r in open_ and open_[r]["seq"] == frontier else max(c, frontier)
            for r, c in completed.items()
        }
    else:
        target = next(p["entered"] for r, p in sorted(progress.items()) if entered[r] == frontier)
    note = (
        " (synchronous: the backend gave nothing to watch, so its completion is counted at the next phase;"
        " on NCCL the flight recorder's device view says whether the GPU completed it)"
        if target.get("sync")
        else ""
    )
    behind = [r for r in progress if entered[r] < frontier]
    # A collective cannot succeed on any member while another member never entered it: a rank
    # that reports it completed saw its Work end in error (gloo marks a timed-out Work completed).
    members = _members(target.get("group"))
    blocked = [r for r in behind if members is None or r in members]
    waiting = [
        r
        for r in progress
        if entered[r] >= frontier and (completed[r] < frontier or (blocked and (members is None or r in members)))
    ]
    if behind:
        head = f"{_ranks(behind)} never entered {describe(target)}"
        if waiting:
            return f"{head}; {_ranks(waiting)} {'waits' if len(waiting) == 1 else 'wait'} in it{note}"
        return f"{head}; the others completed it{note}"
    if waiting:
        return (
            f"every rank entered {describe(target)} and {_ranks(waiting)} did not complete it "
            f"(mismatched sizes or a stuck transport){note}"
        )
    where = ", ".join(f"rank {r} in {phases[r]}" for r in sorted(progress) if r in phases)
    return f"every rank completed {describe(target)}, its last collective; they are stuck outside collectives" + (
        f" ({where})" if where else ""
    )


def per_rank_lines(progress: Mapping[int, Mapping[str, Any]], phases: Mapping[int, str] | None = None) -> list[str]:
    """One line per rank: its phase, last collective entered and last completed, and the oldest
    not completed where that is not the last entered (the rank's thread ran ahead of it)."""
    phases = phases or {}
    return [
        f"rank {r}: {f'phase {phases[r]}; ' if r in phases else ''}last entered {describe(p.get('entered'))}; "
        f"last completed {describe(p.get('completed'))}{_behind_its_thread(p)}"
        for r, p in sorted(progress.items())
    ]


def _behind_its_thread(records: Mapping[str, Any]) -> str:
    oldest, entered = records.get("oldest_open"), records.get("entered")
    if not oldest or (entered and entered.get("seq") == oldest.get("seq")):
        return ""
    return f"; oldest not completed {describe(oldest)}"
