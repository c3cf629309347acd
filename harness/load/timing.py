"""Refuse spec entries that assert observation fields whose value depends on thread timing.

Those fields are declared in :mod:`harness.contract.fields` as varying run to run on the spec's
backend (``memory.bytes.temp`` and ``total`` on gloo and NCCL: FSDPMemTracker's ``temp`` depends on
which thread runs gloo's reduce-scatter copy-out callback and when the copy is freed); under the
fake backend nothing runs asynchronously, so there they may be asserted.
"""

from __future__ import annotations

from typing import Any

from harness.contract import fields
from harness.language.kinds import read_by

__all__ = ["timing_dependent_errors"]

_REAL = ("gloo", "nccl")  # "auto" picks one of these


def timing_dependent_errors(entry: Any, backend: str) -> list[str]:
    """Why ``entry`` (a :class:`harness.judge.checks.Entry`) asserts a timing-dependent field
    on ``backend`` (the spec's ``backend``: auto, gloo, nccl or fake), one message per field;
    [] when it does not."""
    worlds = ("fake",) if backend == "fake" else _REAL if backend == "auto" else (backend,)
    sources = read_by(entry.check)
    out = []
    for name in entry.expect:
        source = sources.get(name)
        if source is None or source.aspect != "behaviour" or source.masked:
            continue  # a message varies only in what compare masks (ports): a pattern can match it
        if any(not fields.stable(source.path, world) for world in worlds):
            out.append(
                f"entry {entry.id!r}: {name!r} depends on thread timing on a real backend ({source.varies[:120]}...); "
                f"not checkable: simulate it (backend: fake) or drop it; see harness/contract/fields.py, {source.path}"
            )
    return out
