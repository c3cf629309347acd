"""A ``Partial`` DTensor's full value from the ranks' local values, with no collective.

``clip_grad_norm_`` with ``norm_type: inf`` returns a ``Partial(max)`` DTensor (torch 2.13):
each rank holds its own maximum, the full value is the maximum over the mesh dim. Calling
``full_tensor()`` in the rank would issue an all-reduce that the collective recorder records as
the run's; instead each rank records its ``local_value`` and placements, and the document's
assembly reduces them here, where nothing records.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

__all__ = ["REDUCTIONS", "fill_partial_norms"]

REDUCTIONS: dict[str, Callable[[list[float]], float]] = {
    "sum": sum,
    "avg": lambda v: sum(v) / len(v),
    "max": max,
    "min": min,
}
"""DTensor's ``Partial`` reduce ops (``Partial(sum)``, ``Partial(avg)``, ``Partial(max)``,
``Partial(min)``) as functions of the local values."""

_PARTIAL = re.compile(r"^Partial\((?P<op>\w+)\)$")


def _full(
    values: dict[tuple[int, ...], float], placements: Sequence[str], mesh_shape: Sequence[int]
) -> dict[tuple[int, ...], float] | None:
    """Reduce ``values`` (coords -> local value) along each Partial mesh dim; None when a value
    or a rank is missing or the op is unknown."""
    for dim, placement in enumerate(placements):
        m = _PARTIAL.match(placement)
        if m is None:
            continue
        reduce = REDUCTIONS.get(m["op"])
        if reduce is None:
            return None
        reduced = {}
        for coords in values:
            peers = [coords[:dim] + (k,) + coords[dim + 1 :] for k in range(mesh_shape[dim])]
            if any(p not in values for p in peers):
                return None
            reduced[coords] = reduce([values[p] for p in peers])
        values = reduced
    return values


def fill_partial_norms(entries: Sequence[Mapping[str, Any]], mesh_shape: Sequence[int]) -> None:
    """Set ``value`` of each rank's ``grad_norms`` record whose placements hold a ``Partial``.

    Args:
        entries: the document's rank entries (``coords``, ``grad_norms`` with ``local_value``,
            ``placements``, ``step_index``), every rank of the mesh (a simulated run observes
            some ranks and has no values: nothing is filled).
        mesh_shape: the device mesh's shape.

    Updates the records in place; a value that cannot be computed stays None.
    """
    per_step: dict[int, dict[tuple[int, ...], dict[str, Any]]] = {}
    for entry in entries:
        for k, record in enumerate(entry.get("grad_norms") or []):
            if any(_PARTIAL.match(p) for p in record.get("placements", [])):
                per_step.setdefault(k, {})[tuple(entry.get("coords", ()))] = record
    for records in per_step.values():
        values = {c: r.get("local_value") for c, r in records.items()}
        if any(v is None for v in values.values()):
            continue
        placements = next(iter(records.values()))["placements"]
        full = _full(values, placements, mesh_shape)
        if full is not None:
            for coords, record in records.items():
                record["value"] = full[coords]
