"""Refuse spec entries that assert observation fields whose value depends on thread timing.

Which fields those are is written once, in the observation schema
(``harness/contract/observation.schema.json``: ``memory`` -> ``x-timing-dependent``), with the
reason: on a real backend FSDPMemTracker's ``temp`` bytes (hence ``total``) depend on which
thread runs gloo's reduce-scatter copy-out callback and when the copy is freed. Under the fake
backend nothing runs asynchronously, so there they may be asserted.

Self-contained: :func:`timing_dependent_errors` takes one loaded entry and the spec's backend.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

__all__ = ["timing_dependent", "timing_dependent_errors"]


@lru_cache(maxsize=None)
def timing_dependent() -> Mapping[str, Any]:
    """The schema's ``x-timing-dependent`` note for memory snapshots: ``{"categories": [...], ...}``."""
    text = resources.files("harness").joinpath("contract/observation.schema.json").read_text(encoding="utf-8")
    memory = json.loads(text)["$defs"]["rank"]["properties"]["memory"]
    return memory["x-timing-dependent"]


def timing_dependent_errors(entry: Any, backend: str) -> list[str]:
    """Why ``entry`` (a :class:`harness.judge.checks.Entry`) asserts a timing-dependent field
    on ``backend`` (the spec's ``backend``), one message per field; [] when it does not.

    Only ``memory`` entries are concerned, and only on a real backend (anything but "fake").
    """
    if entry.check != "memory" or backend == "fake":
        return []
    note = timing_dependent()
    return [
        f"entry {entry.id!r}: {field!r} depends on thread timing on a real backend (gloo's reduce-scatter copy "
        f"counts as temp while a thread holds it); not checkable: simulate it (backend: fake) or drop it; "
        f"see observation.schema.json, memory: x-timing-dependent"
        for field in entry.expect
        if field in note["categories"]
    ]
