"""The instruments a spec's run needs: those filling the fields its entries read.

An entry of check kind K reads the fields K declares (:func:`harness.language.kinds.read_by`), each
filled by the instruments of :func:`harness.contract.instrument_names.instruments_filling`: one
filling a field's whole part is needed by every entry of K, one filling a field inside another's
part (the replica's ``grad_norms.reference``) only by an entry naming a field computed from it. A
run pays for nothing it does not check (``harness run --all-instruments`` records everything).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any, Iterable

from harness.contract import fields
from harness.contract.instrument_names import INSTRUMENTS, instruments_filling
from harness.language.entry import Entry
from harness.language.kinds import covering_reads, get_kind

__all__ = ["needed_instruments", "setup_instruments", "chosen_setup"]


@lru_cache(maxsize=None)
def _reads(kind: str) -> tuple[tuple[frozenset[str], frozenset[str], frozenset[str]], ...]:
    """(instruments of the part, instruments within the part, the kind's names computed from it)
    for every field that check kind ``kind`` reads."""
    out = []
    definition = get_kind(kind)
    for f in fields.fields():
        reads = covering_reads(definition, f.path)
        if reads is None:
            continue
        filling = instruments_filling(f.path)
        whole = instruments_filling(f.path.split(".", 1)[0])
        names = frozenset(reads.names or (f.path.rsplit(".", 1)[-1],))
        out.append((whole, filling - whole, names))
    return tuple(out)


def needed_instruments(entries: Iterable[Entry]) -> frozenset[str]:
    """The instruments (names of :data:`~harness.contract.instrument_names.INSTRUMENTS`) that the
    fields ``entries`` read need; empty for entries that read no instrument's field (environment,
    state dicts, errors)."""
    needed: set[str] = set()
    for entry in entries:
        named = set(entry.expect) | set(entry.selectors)
        for whole, within, names in _reads(entry.check):
            needed |= whole
            if within and names & named:
                needed |= within
    return frozenset(needed)


def setup_instruments(setup: Any) -> frozenset[str]:
    """The instruments ``setup`` itself needs whatever its entries read: timing the step's own
    collectives (``bandwidth.step``) replays the sizes the collective recorder saw."""
    bandwidth = getattr(setup, "bandwidth", None)
    return frozenset({"collectives"}) if bandwidth is not None and bandwidth.step else frozenset()


def chosen_setup(spec: Any, *, every: bool = False, also: Iterable[str] = ()) -> Any:
    """``spec.setup`` (a :class:`~harness.load.setup.RunSetup`) with the instruments its entries
    need (:func:`needed_instruments`), those the setup needs (:func:`setup_instruments`) and
    ``also``; ``every``, or entries that need all of them: every instrument (``instruments`` None,
    the document then as a run with all of them writes it)."""
    needed = needed_instruments(item.entry for item in spec.items) | setup_instruments(spec.setup) | frozenset(also)
    if every or needed == frozenset(INSTRUMENTS):
        return dataclasses.replace(spec.setup, instruments=None)
    return dataclasses.replace(spec.setup, instruments=tuple(sorted(needed)))
