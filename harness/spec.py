"""Load a spec: YAML (safe loading only) -> schema validation -> entries ready to check.

A spec (see harness/schemas/spec.schema.json) holds a ``setup`` for the harness and
``tables``, one per table or claim of the document. Every row or entry of a table becomes one
:class:`harness.checks.Entry`, i.e. one test item.

Every error raises :class:`SpecError` naming the file, the line, the key path and what was
expected; nothing here raises a bare traceback for bad input.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterator, Mapping

import jsonschema
import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from harness.checks import Entry, make_entry
from harness.expect import ExpectationError
from harness.setup import RunSetup

_ENTRY_META = ("id", "says", "torch", "deviation", "drafted")


class SpecError(ValueError):
    """A spec that cannot be used. ``str()`` reads ``file:line: key.path: what was expected``."""

    def __init__(self, path: str | Path, line: int, key_path: str, message: str):
        self.path, self.line, self.key_path, self.message = str(path), line, key_path, message
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {key_path + ': ' if key_path else ''}{message}")


@dataclass
class SpecItem:
    """One checkable entry with its gating.

    Attributes:
        entry: the check entry.
        torch_range: PEP 440 range for torch ('' = any); outside it the item is skipped.
        deviation: reason (and link) if reality is known to differ from the document.
        drafted: True if written by 'harness draft' and not yet reviewed.
    """

    entry: Entry
    torch_range: str = ""
    deviation: Mapping[str, str] | None = None
    drafted: bool = False

    def skip_reason(self, torch_version: str) -> str | None:
        """Why this item does not apply to ``torch_version`` (None when it applies)."""
        # prereleases=True: a nightly (2.14.0.dev20260101) is a torch 2.14 for a range like '>=2.6'
        if self.torch_range and not SpecifierSet(self.torch_range).contains(Version(_release(torch_version)), prereleases=True):
            return f"requires torch {self.torch_range}; running {torch_version}"
        return None


@dataclass
class Spec:
    """A loaded spec: its setup and its items in file order."""

    path: Path
    name: str
    title: str
    document: str
    setup: RunSetup
    backend: str
    timeout_s: float
    items: list[SpecItem] = field(default_factory=list)
    raw: Mapping[str, Any] = field(default_factory=dict)


def _release(version: str) -> str:
    return re.split(r"[+]", version)[0]


def _schema() -> Mapping[str, Any]:
    text = resources.files("harness").joinpath("schemas/spec.schema.json").read_text()
    return json.loads(text)


_VALIDATOR = None


def _validator() -> jsonschema.Draft202012Validator:
    global _VALIDATOR
    if _VALIDATOR is None:
        _VALIDATOR = jsonschema.Draft202012Validator(_schema())
    return _VALIDATOR


def _line_index(node: yaml.Node, path: tuple = ()) -> Iterator[tuple[tuple, int]]:
    """Yield (key path, 1-based line) for every node of a composed YAML document."""
    yield path, node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield from _line_index(value, path + (key.value,))
            yield path + (key.value,), key.start_mark.line + 1  # a key's own line, not its value's
    elif isinstance(node, yaml.SequenceNode):
        for i, child in enumerate(node.value):
            yield from _line_index(child, path + (i,))


def _check_duplicate_keys(spec_path: Path, node: yaml.Node, path: tuple = ()) -> None:
    """YAML keeps the last of two equal keys silently; in a spec that would drop a check."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key, value in node.value:
            if key.value in seen:
                raise SpecError(spec_path, key.start_mark.line + 1, _dotted(path + (key.value,)),
                                f"duplicate key {key.value!r} (first at line {seen[key.value]}); each key once per mapping")
            seen[key.value] = key.start_mark.line + 1
            _check_duplicate_keys(spec_path, value, path + (key.value,))
    elif isinstance(node, yaml.SequenceNode):
        for i, child in enumerate(node.value):
            _check_duplicate_keys(spec_path, child, path + (i,))


def _dotted(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class _Lines:
    def __init__(self, index: Mapping[tuple, int]):
        self.index = index

    def __call__(self, path: tuple) -> int:
        path = tuple(path)
        while path and path not in self.index:
            path = path[:-1]
        return self.index.get(path, 0)


def load_spec(path: str | Path) -> Spec:
    """Read, validate and expand one spec file.

    Raises:
        SpecError: unreadable YAML, schema violation, unknown check field or selector,
            unreadable figure, unknown step name, bad torch range, duplicate entry id.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(path, 0, "", f"cannot read file: {exc.strerror}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise SpecError(path, mark.line + 1 if mark else 0, "", f"not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if node is None or not isinstance(data, dict):
        raise SpecError(path, 0, "", "expected a mapping with keys spec, title, document, setup, tables")
    _check_duplicate_keys(path, node)
    lines = _Lines(dict(_line_index(node)))

    errors = sorted(_validator().iter_errors(data), key=lambda e: (len(list(e.absolute_path)), list(map(str, e.absolute_path))))
    if errors:
        err = _most_specific(errors)
        p = tuple(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            extra = [k for k in err.instance if k not in err.schema.get("properties", {})]
            p += tuple(extra[:1])  # point at the unexpected key, not at its mapping
        raise SpecError(path, lines(p), _dotted(p), _schema_message(err)) from None

    try:
        setup = RunSetup.from_mapping(data["setup"])
    except (ValueError, TypeError) as exc:
        raise SpecError(path, lines(("setup",)), "setup", str(exc)) from None
    _check_model_config(path, lines, setup)

    spec_range = data.get("torch", "")
    _check_range(path, lines, ("torch",), spec_range)
    spec = Spec(path=path, name=data["spec"], title=data["title"], document=data["document"], setup=setup,
                backend=data.get("backend", "auto"), timeout_s=float(data.get("timeout_s", 300)), raw=data)
    seen_ids: dict[tuple[str, str], int] = {}
    for t_index, table in enumerate(data["tables"]):
        spec.items.extend(_table_items(path, lines, t_index, table, spec_range, seen_ids))
    return spec


def _check_model_config(path: Path, lines: "_Lines", setup: RunSetup) -> None:
    """Build the Qwen3Config now, so a bad model config fails at load, not inside a rank."""
    from model import get_config

    key = ("setup", "model", "overrides") if setup.model.overrides else ("setup", "model", "config")
    try:
        get_config(setup.model.config, **setup.model.overrides)
    except (ValueError, TypeError) as exc:
        raise SpecError(path, lines(key), _dotted(key), str(exc)) from None


def _most_specific(errors: list[jsonschema.ValidationError]) -> jsonschema.ValidationError:
    """The deepest error, descending into oneOf/anyOf contexts to the branch that got furthest."""
    err = max(errors, key=lambda e: len(list(e.absolute_path)))
    while err.context and not _is_table_form(err):
        err = max(err.context, key=lambda e: len(list(e.absolute_path)))
    return err


def _is_table_form(err: jsonschema.ValidationError) -> bool:
    """The table's oneOf (columns+rows | entries): its branches' 'required' errors say less than it."""
    return err.validator in ("oneOf", "not") and "columns" in str(err.schema)


def _schema_message(err: jsonschema.ValidationError) -> str:
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        return f"{err.message}; allowed keys: {allowed}"
    if err.validator == "enum":
        return f"expected one of {err.validator_value}, got {err.instance!r}"
    if err.validator == "required":
        return err.message
    if _is_table_form(err):
        return "a table holds either 'columns' with 'rows', or 'entries' (one of the two forms, not both)"
    return f"{err.message} (schema: {err.validator} {json.dumps(err.validator_value, ensure_ascii=False)[:120]})"


def _check_range(path: Path, lines: _Lines, key: tuple, value: str) -> None:
    if value:
        try:
            SpecifierSet(value)
        except InvalidSpecifier:
            raise SpecError(path, lines(key), _dotted(key), f"expected a PEP 440 range like '>=2.6,<2.15', got {value!r}") from None


def _slug(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "x".join(_slug(v) for v in value)
    if isinstance(value, Mapping):
        return "-".join(f"{k}_{_slug(v)}" for k, v in value.items())
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", str(value)).strip("_")


def _table_items(path: Path, lines: _Lines, t_index: int, table: Mapping[str, Any], spec_range: str,
                 seen_ids: dict[tuple[str, str], int]) -> list[SpecItem]:
    """Expand one table; ``seen_ids`` maps (table title, entry id) to its line across the spec,
    since tables sharing a title share a pytest collector and ids must stay unique there."""
    base = ("tables", t_index)
    kind = table["check"]
    shared = dict(table.get("with", {}))
    title = table.get("title", table["section"])
    _check_range(path, lines, base + ("torch",), table.get("torch", ""))
    raw_entries: list[tuple[tuple, dict]] = []
    if "rows" in table:
        columns = table["columns"]
        for r_index, row in enumerate(table["rows"]):
            key = base + ("rows", r_index)
            if len(row) != len(columns):
                raise SpecError(path, lines(key), _dotted(key),
                                f"expected {len(columns)} values for columns {columns}, got {len(row)}")
            raw_entries.append((key, dict(zip(columns, row))))
    else:
        for e_index, entry in enumerate(table["entries"]):
            raw_entries.append((base + ("entries", e_index), dict(entry)))

    items = []
    for key, values in raw_entries:
        meta = {k: values.pop(k) for k in _ENTRY_META if k in values}
        merged = {**shared, **values}
        entry_id = meta.get("id") or _default_id(kind, values) or f"row{key[-1]}"
        if (title, entry_id) in seen_ids:
            raise SpecError(path, lines(key), _dotted(key),
                            f"duplicate entry id {entry_id!r} in table {title!r} (first at line {seen_ids[title, entry_id]}); "
                            "give one an 'id' or its table another 'title'")
        seen_ids[title, entry_id] = lines(key)
        _check_range(path, lines, key + ("torch",), meta.get("torch", ""))
        try:
            _semantic_checks(kind, merged)
            entry = make_entry(kind, merged, id=entry_id, says=meta.get("says", ""), section=table["section"],
                               table=title, spec=str(path), line=lines(key))
        except (ValueError, ExpectationError) as exc:
            raise SpecError(path, lines(key), _dotted(key), str(exc)) from None
        ranges = [r for r in (spec_range, table.get("torch", ""), meta.get("torch", "")) if r]
        items.append(SpecItem(entry, ",".join(ranges), meta.get("deviation"), bool(meta.get("drafted"))))
    return items


_ID_KEYS = ("param", "fqn", "step", "rank", "module", "unit", "layer", "point", "state", "select")


def _default_id(kind: str, values: Mapping[str, Any]) -> str:
    parts = [f"{k}{_slug(values[k])}" if k in ("rank", "layer") else _slug(values[k]) for k in _ID_KEYS if k in values]
    return "-".join(p for p in parts if p)


def _semantic_checks(kind: str, values: Mapping[str, Any]) -> None:
    from model.steps import STEP_NAMES

    if kind == "step" and values.get("step") not in STEP_NAMES:
        raise ValueError(f"unknown step {values.get('step')!r}; steps: {list(STEP_NAMES)}")
    if kind == "param" and not ("fqn" in values or ("param" in values and "layer" in values)):
        raise ValueError("a 'param' entry names 'param' with its 'layer' (e.g. with: {layer: 0}), or a full 'fqn'")
    if kind == "param_state" and values.get("point") not in ("pre_forward", "post_forward"):
        raise ValueError(f"'point' must be pre_forward or post_forward, got {values.get('point')!r}")
    if kind == "memory" and "state" not in values:
        raise ValueError("a 'memory' entry names an FSDPMemTracker 'state', e.g. 'After Pre-Forward'")
    if kind == "memory" and not any(k in values for k in ("layer", "unit", "module")):
        raise ValueError("a 'memory' entry names its module: 'layer' (decoder layer index), 'unit' ('root' or a name) or 'module' (FQN)")
    if kind == "collectives" and not isinstance(values.get("select", {}), Mapping):
        raise ValueError("'select' must be a mapping, e.g. {phase: forward, op: all_gather, layer: 0}")
