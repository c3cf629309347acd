"""Two runs' observations compared field by field: what differs, grouped by spec, check kind and selector.

``python -m harness compare A.json B.json`` reads two ``run --json`` files (another torch
release, another cluster, another commit) and lists every observed value that differs, timings
and process ids left out (:data:`VOLATILE_FIELDS`). Everything here is a pure function of the
two documents; :func:`read_documents` is the only reader of files.

A document is flattened (:func:`flatten_observation`) into ``{Key: value}``: a
:class:`Key` names the part of the document (``memory``, ``collectives``, ``params``, ...,
which is the check kind that reads it), the rank, the selector of the record inside it (a
memory snapshot by module, state, step, microbatch and occurrence; a parameter by FQN; a
collective, event or step tensor by position) and the field. Lists of plain values (shapes,
placements) are one value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple

from harness.contract import strict_json

__all__ = [
    "VOLATILE_FIELDS",
    "KINDS",
    "Key",
    "Difference",
    "CompareError",
    "flatten_observation",
    "compare_documents",
    "read_documents",
    "format_differences",
    "summary_line",
    "selector_text",
]

VOLATILE_FIELDS = frozenset({"timings_s", "time_s", "pid"})
"""Fields that differ in every run and are never compared: the phases' wall times
(``timings_s``), a timed collective's ``time_s`` (``bandwidth``), a rank's process id."""

KINDS: dict[str, str] = {
    "memory": "memory",
    "collectives": "collectives",
    "params": "param",
    "param_states": "param_state",
    "fully_shard_calls": "param_state",
    "buffers": "buffer",
    "steps": "step",
    "events": "events",
    "grad_norms": "grad_norm",
    "param_updates": "param_update",
    "numerics": "numerics",
    "input": "input",
    "output": "input",
    "environment": "environment",
    "state_dict": "state_dict",
    "bandwidth": "bandwidth",
    "error": "expect_error",
}
"""A rank entry's part -> the check kind that reads it (parts not listed keep their own name)."""

_BY_NAME = {"params": "fqn", "fsdp_units": "name"}  # lists whose records are selected by a name field


class Key(NamedTuple):
    """Where a value sits: document part, rank (None for the document's own parts), selector, field."""

    part: str
    rank: int | None
    selector: tuple
    field: str


@dataclass(frozen=True)
class Difference:
    """One value that differs: in ``spec``, at ``key``; ``a`` / ``b`` are the two values (None: absent)."""

    spec: str
    key: Key
    a: Any
    b: Any


class CompareError(ValueError):
    """A file cannot be compared; the message names it and says why."""


def _leaves(value: Any, path: tuple = ()) -> Iterable[tuple[tuple, Any]]:
    """(path, value) for every plain value; a list of plain values is one value."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if k not in VOLATILE_FIELDS:
                yield from _leaves(v, path + (str(k),))
    elif isinstance(value, list) and any(isinstance(v, (Mapping, list)) for v in value):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))
    else:
        yield path, value


def _memory(rank: int | None, records: list[Mapping[str, Any]]) -> Iterable[tuple[Key, Any]]:
    seen: dict[tuple, int] = {}
    for m in records:
        where = (m.get("module"), m.get("state"), m.get("step_index"), m.get("microbatch"))
        occurrence = seen.get(where, 0)
        seen[where] = occurrence + 1
        for category, value in (m.get("bytes") or {}).items():
            yield Key("memory", rank, where + (occurrence,), category), value


def _part(part: str, rank: int | None, value: Any) -> Iterable[tuple[Key, Any]]:
    if part == "memory" and isinstance(value, list):
        yield from _memory(rank, value)
        return
    if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        name = _BY_NAME.get(part)
        for i, record in enumerate(value):
            selector = (record.get(name),) if name and name in record else (i,)
            for path, leaf in _leaves(record):
                yield Key(part, rank, selector, ".".join(map(str, path))), leaf
        return
    for path, leaf in _leaves(value):
        yield Key(part, rank, path[:-1] if len(path) > 1 else (), str(path[-1]) if path else part), leaf


def flatten_observation(doc: Mapping[str, Any]) -> dict[Key, Any]:
    """Every compared value of an observation document (``fsdp2-observation/1``) by its :class:`Key`."""
    out: dict[Key, Any] = {}
    for part, value in doc.items():
        if part in VOLATILE_FIELDS or part == "format":
            continue
        if part == "ranks":
            for entry in value:
                rank = entry.get("rank")
                for sub, v in entry.items():
                    if sub not in VOLATILE_FIELDS and sub != "rank":
                        out.update(_part(sub, rank, v))
        else:
            out.update(_part(part, None, value))
    return out


def compare_documents(a: Mapping[str, Mapping[str, Any]], b: Mapping[str, Mapping[str, Any]]) -> list[Difference]:
    """Every difference between two ``{spec path: observation document}`` mappings, in spec order
    then document order; a spec present on one side only is one difference (key part ``spec``)."""
    a, b = _paired(a, b)
    out = []
    for spec in list(a) + [s for s in b if s not in a]:
        if spec not in a or spec not in b:
            out.append(Difference(spec, Key("spec", None, (), "observed"), spec in a, spec in b))
            continue
        fa, fb = flatten_observation(a[spec]), flatten_observation(b[spec])
        for key in list(fa) + [k for k in fb if k not in fa]:
            va, vb = fa.get(key), fb.get(key)
            if key not in fa or key not in fb or json.dumps(va, sort_keys=True) != json.dumps(vb, sort_keys=True):
                out.append(Difference(spec, key, va, vb))
    return out


def _paired(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """Key both sides by file name where the paths differ (``specs/x.yaml`` vs ``/abs/specs/x.yaml``)
    and every name is unique on each side; else as given."""
    names_a, names_b = [Path(k).name for k in a], [Path(k).name for k in b]
    if set(a) == set(b) or len(set(names_a)) != len(a) or len(set(names_b)) != len(b):
        return a, b
    return dict(zip(names_a, a.values())), dict(zip(names_b, b.values()))


def read_documents(path: str | Path) -> dict[str, dict[str, Any]]:
    """``{spec path: observation document}`` of a ``run --json`` file (or one bare document).

    Raises:
        CompareError: unreadable, not JSON, or holding no observation.
    """
    path = Path(path)
    try:
        doc = strict_json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CompareError(f"{path}: cannot read: {exc}") from None
    except ValueError as exc:
        raise CompareError(f"{path}: not JSON: {exc}") from None
    if isinstance(doc, dict) and isinstance(doc.get("observations"), dict):
        return doc["observations"]
    if isinstance(doc, dict) and str(doc.get("format", "")).startswith("fsdp2-observation"):
        return {str(path): doc}
    raise CompareError(f"{path}: expected a file written by 'harness run --json' (an 'observations' mapping)")


def selector_text(key: Key) -> str:
    parts = [] if key.rank is None else [f"rank {key.rank}"]
    if key.part == "memory":
        module, state, step, microbatch, occurrence = key.selector
        parts += [module or "root/whole rank", state]
        parts += [f"step {step}"] if step is not None else []
        parts += [f"microbatch {microbatch}"] if microbatch is not None else []
        parts += [f"occurrence {occurrence}"] if occurrence else []
    elif key.part in _BY_NAME:
        parts += [str(s) for s in key.selector]
    else:
        parts += [f"#{s}" if isinstance(s, int) else str(s) for s in key.selector]
    return ", ".join(parts)


def _value(value: Any) -> str:
    return "absent" if value is None else json.dumps(value, ensure_ascii=False)


def format_differences(differences: list[Difference], name_a: str = "A", name_b: str = "B") -> list[str]:
    """Lines: the spec, then per check kind and selector its differing fields, ``field: A value ≠ B value``."""
    lines: list[str] = []
    spec = group = None
    for d in differences:
        if d.spec != spec:
            spec, group = d.spec, None
            lines.append(d.spec)
        if d.key.part == "spec":
            lines.append(f"  observed only in {name_a if d.a else name_b}")
            continue
        here = (KINDS.get(d.key.part, d.key.part), selector_text(d.key))
        if here != group:
            group = here
            lines.append(f"  {here[0]}  {here[1]}" if here[1] else f"  {here[0]}")
        lines.append(f"    {d.key.field}: {_value(d.a)} ({name_a}) ≠ {_value(d.b)} ({name_b})")
    return lines


def summary_line(differences: list[Difference], specs: int) -> str:
    """``compare: 3 observed values differ in 1 of 48 specs (timings ignored)`` or ``... the same``."""
    if not differences:
        return f"compare: the observations of {specs} spec{'s' if specs != 1 else ''} are the same (timings ignored)"
    touched = len({d.spec for d in differences})
    return (
        f"compare: {len(differences)} observed value{'s' if len(differences) != 1 else ''} differ in {touched} of "
        f"{specs} spec{'s' if specs != 1 else ''} (timings ignored)"
    )
