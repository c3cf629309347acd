"""Setup keys declared once, on the setup dataclasses' fields: type, bounds, default, description.

A setup dataclass declares each spec key with :func:`key`: a ``dataclasses.field`` whose default is
the key's and whose metadata holds its description and JSON Schema keywords; the field's type gives
the rest of the schema. From these, :func:`object_schema` writes the shipped
``harness/schemas/spec.schema.json`` (``python -m harness.load.docs``), :func:`build` makes the
dataclass from a validated mapping and collects each class's ``_rules`` problems, and
:func:`key_rows` lists the keys for docs/setup-keys.md. Imports nothing heavy: loading stays fast.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import json
import types
import typing
from dataclasses import MISSING, dataclass, field
from typing import Any, Callable, Mapping, Union

__all__ = ["Key", "key", "object_schema", "value_schema", "build", "convert", "convert_key", "key_rows", "Problems"]

Problems = list[tuple[str, str]]
"""(key path, what was expected) pairs, e.g. ``("setup.mesh.dim_names", "expected 2 names ...")``."""

_META = "setup_key"


@dataclass(frozen=True)
class Key:
    """One spec key's declaration (a field's ``metadata["setup_key"]``).

    Attributes:
        doc: the key's description (schema ``description``, docs/setup-keys.md).
        schema: JSON Schema keywords merged (recursively) into the type's schema (``{"minimum": 1}``);
            with ``enum`` the key's schema is that enum alone.
        whole: returns the key's whole schema where the type cannot say (an FSDP unit entry).
        null: YAML ``null`` is a value of its own ("pass nothing": torch's default), not "unset".
        at: the key's path where it is not the field's name (``("mesh", "shape")``).
        parse: the YAML value -> the field's value, where the type cannot say.
        required: the key must be written even though the dataclass has a default.
        spread: (dataclass, names left out): the field gathers that dataclass's keys written at this
            level, as (key, value) pairs (the ``fsdp`` mapping's unit options).
    """

    doc: str
    schema: Mapping[str, Any] = field(default_factory=dict)
    whole: Callable[[], dict[str, Any]] | None = None
    null: bool = False
    at: tuple[str, ...] | None = None
    parse: Callable[[Any], Any] | None = None
    required: bool = False
    spread: tuple[type, tuple[str, ...]] | None = None


def key(
    default: Any = MISSING,
    *,
    doc: str,
    default_factory: Any = MISSING,
    null: bool = False,
    at: str | None = None,
    parse: Callable[[Any], Any] | None = None,
    required: bool = False,
    whole: Callable[[], dict[str, Any]] | None = None,
    spread: tuple[type, tuple[str, ...]] | None = None,
    **schema: Any,
) -> Any:
    """A dataclass field declaring one spec key (see :class:`Key`); ``schema`` keywords are JSON
    Schema's (``minimum=1``, ``enum=[...]``, ``items={...}``)."""
    declared = Key(
        doc=doc,
        schema=json.loads(json.dumps(schema)),  # tuples as JSON arrays
        whole=whole,
        null=null,
        at=tuple(at.split(".")) if at else None,
        parse=parse,
        required=required,
        spread=spread,
    )
    return field(default=default, default_factory=default_factory, metadata={_META: declared})


def _declared(cls: type) -> list[tuple[dataclasses.Field, Key, Any]]:
    """(field, declaration, resolved type) of each declared field of ``cls``, in field order."""
    return _declared_cached(cls)


@functools.lru_cache(maxsize=None)
def _declared_cached(cls: type) -> list[tuple[dataclasses.Field, Key, Any]]:
    hints = typing.get_type_hints(cls)
    return [(f, f.metadata[_META], hints[f.name]) for f in dataclasses.fields(cls) if _META in f.metadata]


def _path(f: dataclasses.Field, declared: Key) -> tuple[str, ...]:
    return declared.at or (f.name,)


def _without_none(tp: Any) -> tuple[Any, ...]:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return tuple(a for a in typing.get_args(tp) if a is not type(None))
    return (tp,)


_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _type_schema(tp: Any) -> dict[str, Any]:
    """The JSON Schema a field type gives (``None`` in a union is left to :attr:`Key.null`)."""
    options = _without_none(tp)
    if len(options) > 1:
        schemas = [_type_schema(o) for o in options]
        if all(set(s) == {"type"} for s in schemas):
            return {"type": [s["type"] for s in schemas]}
        raise TypeError(f"cannot write a schema for {tp}: declare it with whole=")
    (tp,) = options
    origin = typing.get_origin(tp)
    if tp in _JSON_TYPES:
        return {"type": _JSON_TYPES[tp]}
    if tp is Any:
        return {}
    if dataclasses.is_dataclass(tp):
        return object_schema(tp)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _type_schema(args[0])}
    if origin in (collections.abc.Mapping, dict) or tp in (Mapping, dict):
        args = typing.get_args(tp)
        value = _type_schema(args[1]) if args else {}
        return {"type": "object", **({"additionalProperties": value} if value else {})}
    raise TypeError(f"cannot write a schema for {tp}: declare it with whole=")


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra``'s keywords, sub-schemas merged alike; an enum replaces the type."""
    if "enum" in extra:
        return dict(extra)
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def _json_default(f: dataclasses.Field) -> Any:
    """The field's default as JSON, or MISSING where it has none a spec could write."""
    value, declared = f.default, f.metadata[_META]
    if value is MISSING or value is None and not declared.null or declared.parse is not None or declared.required:
        return MISSING  # no default, "unset", a required key, or a default whose spec form differs
    try:
        return json.loads(json.dumps(value))
    except TypeError:  # a dataclass instance
        return MISSING


def value_schema(f: dataclasses.Field, declared: Key, tp: Any) -> dict[str, Any]:
    """The JSON Schema of one key: its type's, with its declared keywords, null, default, description."""
    schema = declared.whole() if declared.whole is not None else _merge(_type_schema(tp), declared.schema)
    if declared.null and "enum" not in schema:
        types_ = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        schema["type"] = [*types_, "null"] if "null" not in types_ else types_
    out = {k: v for k, v in schema.items() if k != "description"}
    default = _json_default(f)
    if default is not MISSING:
        out["default"] = default
    out["description"] = declared.doc
    return out


def object_schema(cls: type) -> dict[str, Any]:
    """The JSON Schema of ``cls``'s mapping: every declared key (nested where :attr:`Key.at`
    says), no other key; ``cls._SCHEMA_EXTRA`` adds keywords (a ``oneOf`` over its keys)."""
    props: dict[str, Any] = {}
    required: list[str] = []
    groups = getattr(cls, "_KEY_GROUPS", {})
    for f, declared, tp in _declared(cls):
        if declared.spread is not None:
            other, left_out = declared.spread
            for g, d, t in _declared(other):
                if g.name not in left_out:
                    props[g.name] = value_schema(g, d, t)
            continue
        *head, name = _path(f, declared)
        target = props
        for part in head:
            group = target.setdefault(
                part, {"type": "object", "additionalProperties": False, "description": groups[part], "properties": {}}
            )
            target = group["properties"]
        target[name] = value_schema(f, declared, tp)
        if not head and (declared.required or f.default is MISSING and f.default_factory is MISSING):
            required.append(name)
    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "description": _class_doc(cls),
        "properties": props,
    }
    if required:
        schema["required"] = required
    schema.update(getattr(cls, "_SCHEMA_EXTRA", {}))
    return schema


def _class_doc(cls: type) -> str:
    """The first paragraph of ``cls``'s docstring, on one line."""
    return " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())


def convert(tp: Any, value: Any, parse: Callable[[Any], Any] | None = None) -> Any:
    """A schema-validated YAML value -> the value of a field of type ``tp``: a mapping (or
    (key, value) pairs) of a setup dataclass becomes one (:func:`build`, without its rules), a list
    a tuple, an int where a float is declared a float; ``None`` stays None (``parse``, where given,
    takes every value, None too)."""
    if parse is not None:
        return parse(value)
    if value is None:
        return None
    options = _without_none(tp)
    if len(options) > 1:
        return value
    (tp,) = options
    if dataclasses.is_dataclass(tp):
        return value if isinstance(value, tp) else build(tp, dict(value))[0]
    if tp is float:
        return float(value)
    origin = typing.get_origin(tp)
    if origin is tuple:
        args = typing.get_args(tp)
        item = args[0] if len(args) == 2 and args[1] is Ellipsis else Any
        return tuple(convert(item, v) for v in value)
    if origin in (collections.abc.Mapping, dict):
        args = typing.get_args(tp)
        return {str(k): convert(args[1], v) for k, v in value.items()} if args else dict(value)
    return value


def convert_key(cls: type, name: str, value: Any) -> Any:
    """A written value of ``cls``'s key ``name`` -> the field's value; KeyError where none is declared."""
    for f, declared, tp in _declared(cls):
        if f.name == name:
            return convert(tp, value, declared.parse)
    raise KeyError(name)


def build(cls: type, given: Mapping[str, Any], where: str = "setup") -> tuple[Any, Problems]:
    """``cls`` from a schema-validated mapping of its keys (left out: the default), and every problem
    its ``_rules(self, given, where)`` and those of the dataclasses inside it find, as (key path,
    expected) pairs; ``given`` is the mapping as written, to tell a key left out from its default."""
    kwargs: dict[str, Any] = {}
    problems: Problems = []
    for f, declared, tp in _declared(cls):
        if declared.spread is not None:
            other, left_out = declared.spread
            names = {g.name for g, _, _ in _declared(other)} - set(left_out)
            kwargs[f.name] = tuple(
                (k, declared.parse(v) if declared.parse else v)  # in the order written
                for k, v in given.items()
                if k in names
            )
            continue
        value: Any = given
        for part in _path(f, declared):
            value = value.get(part, MISSING) if isinstance(value, Mapping) else MISSING
        if value is MISSING:
            continue
        inner = [t for t in _without_none(tp) if dataclasses.is_dataclass(t)]
        if inner and declared.parse is None and value is not None:  # a nested setup mapping: its rules too
            kwargs[f.name], found = build(inner[0], value, f"{where}.{'.'.join(_path(f, declared))}")
            problems += found
        elif _is_tuple_of_dataclass(tp) and declared.parse is None:
            item = typing.get_args(_without_none(tp)[0])[0]
            built = [build(item, v, f"{where}.{f.name}[{i}]") for i, v in enumerate(value)]
            kwargs[f.name] = tuple(b for b, _ in built)
            problems += [p for _, found in built for p in found]
        else:
            kwargs[f.name] = convert(tp, value, declared.parse)
    made = cls(**kwargs)
    rules = getattr(made, "_rules", None)
    if rules is not None:
        problems += rules(given, where)
    return made, problems


def _is_tuple_of_dataclass(tp: Any) -> bool:
    (tp, *rest) = _without_none(tp)
    args = typing.get_args(tp)
    return not rest and typing.get_origin(tp) is tuple and len(args) == 2 and dataclasses.is_dataclass(args[0])


def key_rows(cls: type, prefix: str = "setup") -> list[tuple[str, dict[str, Any]]]:
    """(key path, its schema) for every key of ``cls``'s mapping and the mappings inside it, in
    declaration order; a list of mappings adds its items' keys under ``path[]``."""
    rows: list[tuple[str, dict[str, Any]]] = []

    def walk(schema: Mapping[str, Any], path: str) -> None:
        for name, sub in schema.get("properties", {}).items():
            here = f"{path}.{name}"
            rows.append((here, sub))
            walk(sub.get("then", sub) if "if" in sub else sub, here)  # a mapping form's keys (setup.init)
            items = sub.get("items")
            if isinstance(items, Mapping):
                walk(items.get("then", items), here + "[]")

    walk(object_schema(cls), prefix)
    return rows
