"""Two runs' observations compared field by field: did FSDP2 behave differently?

Every observed value is flattened (:func:`flatten_observation`) by a :class:`Key`: part, rank,
record (named as the check kinds declare, :func:`harness.language.kinds.record_key`), field and
declared path (:mod:`harness.contract.fields`). A difference is a behaviour difference unless the
declarations set it apart (:func:`set_apart`: environment, timings, failures, values declared to
vary run to run). Messages are compared masked (:func:`mask`). Pure, but for :func:`read_run_file`."""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple

from harness.contract import fields, strict_json
from harness.contract.instrument_names import instruments_filling, recorded_instruments
from harness.language.kinds import record_key
from harness.language.vocabulary import RecordKey

__all__ = [
    "APART",
    "INSTRUMENTS_KEY",
    "Key",
    "Difference",
    "RunFile",
    "CompareError",
    "flatten_observation",
    "record_of",
    "set_apart",
    "mask",
    "compare_documents",
    "compare_runs",
    "select",
    "read_run_file",
    "read_documents",
    "selector_text",
]

APART: dict[str, str] = {
    "environment": "environment",
    "timing": "timings",
    "diagnostic": "tracebacks and pids",
    "varies": "varies run to run",
    "instruments": "instruments on one side only",
}
"""Why a difference is set apart -> its heading (aspects of :data:`harness.contract.field_tree.ASPECTS`
other than behaviour, ``varies``, and ``instruments``: the two runs ran different instruments, and
only the fields both recorded are compared)."""


class Key(NamedTuple):
    """Where a value sits: part, rank (None: the document's own), selector, field, and declared path."""

    part: str
    rank: int | None
    selector: tuple
    field: str
    path: str


@dataclass(frozen=True)
class Difference:
    """One value that differs in ``spec`` at ``key``: ``a`` / ``b`` (None when absent; ``present`` says
    which side has it); ``apart``: an :data:`APART` key when it is no behaviour difference."""

    spec: str
    key: Key
    a: Any
    b: Any
    apart: str | None = None
    present: tuple[bool, bool] = (True, True)


@dataclass(frozen=True)
class RunFile:
    """A ``run --json`` file: ``documents`` and ``failed`` (spec path -> observation, why it failed), the
    torch version, ``skipped`` (spec path -> why it was skipped whole)."""

    documents: Mapping[str, Mapping[str, Any]]
    failed: Mapping[str, str] = field(default_factory=dict)
    torch_version: str | None = None
    skipped: Mapping[str, str] = field(default_factory=dict)


class CompareError(ValueError):
    """A file cannot be compared; the message names it and says why."""


def _declared(*keys: Any) -> str:
    return ".".join(str(k) for k in keys if not isinstance(k, int))


def _leaves(value: Any, path: tuple = ()) -> Iterable[tuple[tuple, Any]]:
    """(path, value) for every plain value; a list of plain values is one value."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _leaves(v, path + (str(k),))
    elif isinstance(value, list) and any(isinstance(v, (Mapping, list)) for v in value):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))
    else:
        yield path, value


def _records(
    part: str, rank: int | None, root: str, records: list, keyed: RecordKey | None
) -> Iterable[tuple[Key, Any]]:
    """A list's values, each record named as the kinds declare (:class:`RecordKey`), else by position."""
    seen: dict[tuple, int] = {}
    for i, record in enumerate(records):
        if keyed is None or not any(f in record for f in keyed.fields):
            selector: tuple = (i,)
        else:
            selector = tuple(record.get(f) for f in keyed.fields)
            if keyed.repeats:
                occurrence = seen.get(selector, 0)
                seen[selector] = occurrence + 1
                selector += (occurrence,)
        if keyed is not None and keyed.values is not None:
            for name, value in (record.get(keyed.values) or {}).items():
                yield Key(part, rank, selector, name, _declared(root, keyed.values, name)), value
            continue
        for path, leaf in _leaves(record):
            yield Key(part, rank, selector, ".".join(map(str, path)), _declared(root, *path)), leaf


def _part(part: str, rank: int | None, value: Any) -> Iterable[tuple[Key, Any]]:
    root = part if rank is None else fields.rank_part_path(part)
    keyed = record_key(root)
    only_values = keyed is not None and keyed.values is not None
    if isinstance(value, list) and (only_values or (value and all(isinstance(v, Mapping) for v in value))):
        yield from _records(part, rank, root, value, keyed)
        return
    for path, leaf in _leaves(value):
        where = path[:-1] if len(path) > 1 else ()
        yield Key(part, rank, where, str(path[-1]) if path else part, _declared(root, *path)), leaf


def flatten_observation(doc: Mapping[str, Any], *, every: bool = False) -> dict[Key, Any]:
    """Every observed value of an ``fsdp2-observation/1`` document by :class:`Key`; timings and what
    differs in every run only with ``every``."""
    out: dict[Key, Any] = {}
    for part, value in doc.items():
        if part == "format":
            continue
        if part == "ranks":
            for entry in value:
                rank = entry.get("rank")
                for sub, v in entry.items():
                    if sub != "rank":
                        out.update(_part(sub, rank, v))
        else:
            out.update(_part(part, None, value))
    if every:
        return out
    return {k: v for k, v in out.items() if not _always_differs(k.path)}


def _always_differs(path: str) -> bool:
    declared = fields.lookup(path)
    return declared.aspect == "timing" or (declared.aspect == "diagnostic" and declared.varies is not None)


def record_of(key: Key) -> dict[str, Any] | None:
    """The naming fields of the record holding ``key`` (a memory snapshot's module, state, ...), or None."""
    keyed = record_key(key.path.split(".", 1)[0])
    if keyed is None or len(key.selector) < len(keyed.fields):
        return None
    return dict(zip(keyed.fields, key.selector))


def _worlds(*docs: Mapping[str, Any] | None) -> set[str]:
    return {d["environment"].get("backend") for d in docs if d and isinstance(d.get("environment"), Mapping)}


def set_apart(key: Key, worlds: Iterable[str] = fields.WORLDS) -> str | None:
    """Why a difference at ``key`` says nothing of FSDP2's behaviour (an :data:`APART` key), or None."""
    declared = fields.lookup(key.path)
    if declared.aspect != "behaviour":
        return declared.aspect
    if declared.masked:  # compared masked: what varies (ports, paths) is masked away
        return None
    worlds = [w for w in worlds if w in fields.WORLDS]
    return "varies" if any(not fields.stable(key.path, w, record_of(key)) for w in worlds) else None


_MASKS = (
    (re.compile(r"(?:[A-Za-z]:)?(?:[/\\][\w.+@~-]+){2,}(?::\d+)?"), "<path>"),  # file paths, with a line
    (re.compile(r"\bline \d+"), "line <n>"),
    (re.compile(r"(\.py):\d+"), r"\1:<n>"),
    (re.compile(r"((?:\d{1,3}\.){3}\d{1,3}|\[[0-9a-fA-F:.]+\]|localhost|\w[\w.-]*):\d{2,5}\b"), r"\1:<port>"),
    (re.compile(r"\b(port:? )\d{2,5}\b", re.IGNORECASE), r"\1<port>"),
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "0x<addr>"),
    (re.compile(r"\b(pid:? )\d+\b", re.IGNORECASE), r"\1<pid>"),
)


_SET = re.compile(r"\{([^{}:]+,[^{}:]+)\}")  # a printed Python set: {torch.bfloat16, torch.float32}


def _sorted_set(match: re.Match) -> str:
    return "{" + ", ".join(sorted(item.strip() for item in match.group(1).split(","))) + "}"


def mask(value: Any) -> Any:
    """``value`` (a string) with paths, line numbers, ports, addresses and pids masked and a printed set
    sorted (its order varies run to run); anything else as given."""
    if not isinstance(value, str):
        return value
    for pattern, replacement in _MASKS:
        value = pattern.sub(replacement, value)
    return _SET.sub(_sorted_set, value)


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


INSTRUMENTS_KEY = Key("setup", None, (), "instruments", "setup.instruments")
"""Where the two runs' instrument sets are compared (a run with every one writes no such key)."""


def _instruments(doc: Mapping[str, Any]) -> frozenset[str]:
    setup = doc.get("setup")
    return recorded_instruments(setup if isinstance(setup, Mapping) else {})


def _compare_spec(spec: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Difference]:
    fa, fb = flatten_observation(a, every=True), flatten_observation(b, every=True)
    worlds = _worlds(a, b)
    on_a, on_b = _instruments(a), _instruments(b)
    out = []
    if on_a != on_b:  # like with like: the fields an instrument of one side only fills are not compared
        out.append(Difference(spec, INSTRUMENTS_KEY, sorted(on_a), sorted(on_b), "instruments"))
    for key in list(fa) + [k for k in fb if k not in fa]:
        if key == INSTRUMENTS_KEY or (key.rank is not None and not instruments_filling(key.path) <= on_a & on_b):
            continue
        va, vb = fa.get(key), fb.get(key)
        if key in fa and key in fb:
            if va == vb and type(va) is type(vb):  # the common case, without serialising
                continue
            if fields.lookup(key.path).masked:
                va, vb = mask(va), mask(vb)
            if _text(va) == _text(vb):
                continue
        out.append(Difference(spec, key, va, vb, set_apart(key, worlds), (key in fa, key in fb)))
    return out


def compare_documents(a: Mapping[str, Mapping[str, Any]], b: Mapping[str, Mapping[str, Any]]) -> list[Difference]:
    """Every difference between two ``{spec path: observation}`` mappings (a missing spec: one)."""
    return compare_runs(RunFile(a), RunFile(b))


def _run_key(state: str) -> Key:
    return Key("spec", None, (), state, "spec")


def compare_runs(a: RunFile, b: RunFile) -> list[Difference]:
    """Every difference between two run files; a spec observed on one side only is one difference
    ``run``: "observed", "failed: <why>" or "skipped: <why>" per side (None: not run)."""
    da, db = _paired(a.documents, b.documents)
    fa, fb = _paired(a.failed, b.failed)
    sa, sb = _paired(a.skipped, b.skipped)
    out: list[Difference] = []
    for spec in list(dict.fromkeys([*da, *fa, *sa, *db, *fb, *sb])):
        if spec in da and spec in db:
            out.extend(_compare_spec(spec, da[spec], db[spec]))
            continue
        va, vb = _outcome(spec, da, fa, sa), _outcome(spec, db, fb, sb)
        if va != vb:
            out.append(Difference(spec, _run_key("run"), va, vb))
    return out


def _outcome(spec: str, documents: Mapping, failed: Mapping, skipped: Mapping) -> str | None:
    if spec in documents:
        return "observed"
    if spec in failed:
        return f"failed: {failed[spec]}"
    return f"skipped: {skipped[spec]}" if spec in skipped else None


def _skipped(results: Any) -> dict[str, str]:
    """Spec path -> why, for the specs whose entries were all skipped with one reason."""
    reasons: dict[str, set] = {}
    for r in results if isinstance(results, list) else []:
        if isinstance(r, Mapping) and isinstance(r.get("spec"), str):
            reasons.setdefault(r["spec"], set()).add(r.get("message") if r.get("status") == "skip" else None)
    return {spec: next(iter(why)) for spec, why in reasons.items() if len(why) == 1 and None not in why}


def select(differences: list[Difference], include: Iterable[str] = (), exclude: Iterable[str] = ()) -> list[Difference]:
    """The differences whose declared path matches an ``include`` glob (none: all) and no ``exclude``;
    a spec on one side only is always kept."""
    include, exclude = list(include), list(exclude)

    def kept(d: Difference) -> bool:
        if d.key.part == "spec":
            return True
        if include and not any(fnmatch.fnmatchcase(d.key.path, g) for g in include):
            return False
        return not any(fnmatch.fnmatchcase(d.key.path, g) for g in exclude)

    return [d for d in differences if kept(d)]


def _paired(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """Key both sides by file name where paths differ and every name is unique on each side."""
    names_a, names_b = [Path(k).name for k in a], [Path(k).name for k in b]
    if set(a) == set(b) or len(set(names_a)) != len(a) or len(set(names_b)) != len(b):
        return a, b
    return dict(zip(names_a, a.values())), dict(zip(names_b, b.values()))


def read_run_file(path: str | Path) -> RunFile:
    """The observations, failed specs and torch version of a ``run --json`` file (or one bare document).
    Raises CompareError: unreadable, not JSON, or with no observation and no failed spec."""
    path = Path(path)
    try:
        doc = strict_json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CompareError(f"{path}: cannot read: {exc}") from None
    except ValueError as exc:
        raise CompareError(f"{path}: not JSON: {exc}") from None
    if isinstance(doc, dict) and isinstance(doc.get("observations"), dict):
        failed = doc.get("failed_specs") or {}
        if not isinstance(failed, dict):
            raise CompareError(f"{path}: failed_specs: expected a mapping of spec path -> error, got {failed!r:.80}")
        skipped = {k: v for k, v in _skipped(doc.get("results")).items() if k not in doc["observations"]}
        failed = {k: str(v) for k, v in failed.items()}
        return RunFile(doc["observations"], failed, doc.get("torch_version"), skipped)
    if isinstance(doc, dict) and str(doc.get("format", "")).startswith("fsdp2-observation"):
        return RunFile({str(path): doc}, {}, (doc.get("environment") or {}).get("torch_version"))
    raise CompareError(f"{path}: expected a file written by 'harness run --json' (an 'observations' mapping)")


def read_documents(path: str | Path) -> dict[str, dict[str, Any]]:
    """``{spec path: observation document}`` of a ``run --json`` file (see :func:`read_run_file`)."""
    return dict(read_run_file(path).documents)


def selector_text(key: Key) -> str:
    parts = [] if key.rank is None else [f"rank {key.rank}"]
    keyed = record_key(key.path.split(".", 1)[0])
    if keyed is not None and keyed.show is not None:
        parts += keyed.show(key.selector)
    elif keyed is not None:
        parts += [str(s) for s in key.selector]
    else:
        parts += [f"#{s}" if isinstance(s, int) else str(s) for s in key.selector]
    return ", ".join(parts)
