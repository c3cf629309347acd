"""The check kinds, one module each, found here: :data:`REGISTRY` maps a table's ``check:`` to its definition.

Adding a kind is adding a module here that defines ``KIND`` (a :class:`harness.language.vocabulary.CheckKind`);
then regenerate the schema and docs/check-kinds.md's table (``python -m harness.load.docs``).
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from harness.contract import fields
from harness.language.vocabulary import CheckKind, RecordKey


def _discovered() -> dict[str, CheckKind]:
    kinds = []
    for info in pkgutil.iter_modules(__path__):
        kind = getattr(importlib.import_module(f"{__name__}.{info.name}"), "KIND", None)
        if isinstance(kind, CheckKind):
            kinds.append(kind)
    kinds.sort(key=lambda k: (k.order, k.name))
    names = [k.name for k in kinds]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"check kind(s) {twice} defined in two modules of harness/language/kinds/")
    return {k.name: k for k in kinds}


REGISTRY: dict[str, CheckKind] = _discovered()
"""Check kind name -> definition, in the order docs/check-kinds.md lists them (``order``, then name)."""


def get_kind(name: str) -> CheckKind:
    """The definition of check kind ``name``; ValueError (listing the kinds) where there is none."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown check kind {name!r}; expected one of {list(REGISTRY)}") from None


def covering_reads(kind: CheckKind, path: str):
    """The longest of ``kind``'s reads covering the declared field ``path``, or None."""
    covering = [r for r in kind.reads if path == r.path or path.startswith(r.path + ".")]
    return max(covering, key=lambda r: len(r.path), default=None)


@lru_cache(maxsize=None)
def read_by(kind: str) -> dict[str, fields.ObservedField]:
    """Check kind ``kind``'s field name -> the declared field it is computed from (the first in
    document order), from the kind's ``reads``.

    Raises:
        ValueError: no such kind, or one of its reads names no declared field.
    """
    out: dict[str, fields.ObservedField] = {}
    definition = get_kind(kind)
    declared = [f.path for f in fields.fields()]
    for reads in definition.reads:
        if not any(p == reads.path or p.startswith(reads.path + ".") for p in declared):
            raise ValueError(
                f"check kind {kind!r} reads {reads.path!r}, which harness/contract/fields.py does not declare"
            )
    for f in fields.fields():
        reads = covering_reads(definition, f.path)
        if reads is not None:
            for name in reads.names or (f.path.rsplit(".", 1)[-1],):
                out.setdefault(name, f)
    return out


@lru_cache(maxsize=None)
def part_kind(path: str) -> str:
    """The check kind shown for observed field ``path`` (the first in :data:`REGISTRY` reading it),
    else its first part; KeyError where ``path`` is not declared."""
    declared = fields.lookup(path).path
    return next((k.name for k in REGISTRY.values() if covering_reads(k, declared)), path.split(".", 1)[0])


@lru_cache(maxsize=1)
def _record_keys() -> dict[str, RecordKey]:
    keys: dict[str, RecordKey] = {}
    for kind in REGISTRY.values():
        for key in kind.record_keys:
            if keys.setdefault(key.part, key) != key:
                raise ValueError(
                    f"check kind {kind.name!r} names the records of {key.part!r} otherwise than another kind"
                )
    return keys


def record_key(part: str) -> RecordKey | None:
    """How ``compare`` names the records of observed list ``part`` (None: by position); ValueError on a clash."""
    return _record_keys().get(part)
