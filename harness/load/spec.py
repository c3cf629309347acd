"""Load a spec: YAML (safe loading only) -> schema validation -> entries ready to check.

A spec (harness/schemas/spec.schema.json) holds a ``setup`` for the harness and ``tables``, one per
table or claim of the document; every row or entry becomes one :class:`harness.judge.checks.Entry`,
one test item. Every error raises :class:`SpecError` naming the file, the line, the key path and
what was expected; nothing here raises a bare traceback for bad input.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

from harness.language.entry import Entry
from harness.language.expect import ExpectationError, parse_expectation
from harness.language.kinds import REGISTRY
from harness.language.suggest import closest_first, did_you_mean
from harness.language.vocabulary import CheckKind, Context
from harness.load.hooks import resolve_hooks
from harness.load.model_config import resolve_config_file
from harness.load.schedule import schedule_problems
from harness.load.setup import (
    RunSetup,
    SetupError,
    expert_config_problem,
    expert_parallel_problems,
    reads_the_mesh,
    tensor_parallel_problems,
)
from harness.load.spec_files import SUFFIXES
from harness.load.timing import timing_dependent_errors
from harness.load.units import HOOK_OPTION_KEYS
from harness.load.yaml_safe import YamlFileError, load_file
from model.names import param_fqns

_ENTRY_META = ("id", "says", "torch", "deviation", "drafted")


class SpecError(ValueError):
    """A spec that cannot be used: ``str()`` has one line per error, in file order (``file:line:
    key.path: what was expected``); ``line``, ``key_path`` and ``message`` are the first error's,
    ``errors`` every (line, key path, message)."""

    def __init__(
        self, path: str | Path, line: int, key_path: str, message: str, errors: list[tuple[int, str, str]] | None = None
    ):
        self.path = str(path)
        self.errors = list(errors) if errors else [(line, key_path, message)]
        self.line, self.key_path, self.message = self.errors[0]
        shown = [self._format(*e) for e in self.errors[:MAX_ERRORS_SHOWN]]
        if len(self.errors) > MAX_ERRORS_SHOWN:
            shown.append(f"{self.path}: ... and {len(self.errors) - MAX_ERRORS_SHOWN} more errors")
        super().__init__("\n".join(shown))

    def _format(self, line: int, key_path: str, message: str) -> str:
        where = f"{self.path}:{line}" if line else self.path
        return _cut(f"{where}: {key_path + ': ' if key_path else ''}{message.replace(chr(10), ' ')}")


MAX_LINE = 400
"""Longest error line shown (characters); a longer one is cut, saying how much was left out."""
MAX_ERRORS_SHOWN = 50
"""Most error lines shown for one spec (``SpecError.errors`` keeps them all)."""


def _cut(line: str) -> str:
    if len(line) <= MAX_LINE:
        return line
    return f"{line[: MAX_LINE - 40]} ... ({len(line) - MAX_LINE + 40:,} more characters)"


class _Errors:
    """Every error of one spec file, raised together as one SpecError sorted by line."""

    def __init__(self, path: Path, lines: "_Lines"):
        self.path, self.lines = path, lines
        self.items: list[tuple[int, str, str]] = []

    def add(self, key: tuple, message: str, line: int | None = None) -> None:
        item = (self.lines(key) if line is None else line, _dotted(key), message)
        if item not in self.items:
            self.items.append(item)

    def raise_if_any(self) -> None:
        if self.items:
            ordered = sorted(self.items, key=lambda e: e[0])  # stable: same line keeps discovery order
            raise SpecError(self.path, *ordered[0], errors=ordered)


@dataclass
class SpecItem:
    """One checkable entry with its gating: skipped outside ``torch_range`` (PEP 440, '' = any) or on
    another ``torch_build`` ("cpu", "cuda"; '' = any); ``deviation``: reason (and link) if reality is
    known to differ from the document; ``drafted``: written by 'harness draft', not yet reviewed."""

    entry: Entry
    torch_range: str = ""
    deviation: Mapping[str, str] | None = None
    drafted: bool = False
    torch_build: str = ""

    def skip_reason(self, torch_version: str, torch_build: str | None = None) -> str | None:
        """Why this item does not apply to ``torch_version`` of build ``torch_build`` ("cpu",
        "cuda", None when unknown: an observation written before the field) (None when it applies)."""
        if self.torch_build and torch_build is not None and torch_build != self.torch_build:
            return f"describes a {self.torch_build} build of torch; running {torch_version}, a {torch_build} build"
        # prereleases=True: a nightly (2.14.0.dev20260101) is a torch 2.14 for a range like '>=2.6'
        if not self.torch_range:
            return None
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        if not SpecifierSet(self.torch_range).contains(Version(_release(torch_version)), prereleases=True):
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

    def skip_reason(self, torch_version: str, torch_build: str) -> str | None:
        """Why no entry of this spec applies to ``torch_version`` of build ``torch_build`` ("cpu",
        "cuda"): its ``torch_build`` or ``torch`` range (the spec's, or every table's or entry's)
        excludes it. Then the spec is skipped whole before anything runs (``run``, the pytest
        plugin); None when some entry applies (those that do not are skipped one by one)."""
        reasons = [item.skip_reason(torch_version, torch_build) for item in self.items]
        if not reasons or not all(reasons):
            return None
        distinct = list(dict.fromkeys(reasons))
        return distinct[0] if len(distinct) == 1 else f"every entry is gated out: {'; '.join(distinct)}"


def _release(version: str) -> str:
    return re.split(r"[+]", version)[0]


def _schema() -> Mapping[str, Any]:
    text = resources.files("harness").joinpath("schemas/spec.schema.json").read_text()
    return json.loads(text)


_VALIDATOR = None


def _validator() -> jsonschema.Draft202012Validator:
    """The shipped schema with each table's entries checked only for their metadata keys: the
    loader checks each entry against its check kind itself (harness/language/kinds/, the same
    definitions the schema's ``table_kinds`` is generated from), with messages that know the
    setup, and the table's two forms in :func:`_table_form_errors`."""
    global _VALIDATOR
    if _VALIDATOR is None:
        schema = _schema()
        table = schema["$defs"]["table"]
        table.pop("allOf", None)  # {"$ref": "#/$defs/table_kinds"}
        table.pop("oneOf", None)  # the two table forms: _table_form_errors, without a failed branch per table
        table["properties"]["entries"]["items"] = schema["$defs"]["meta_keys"]  # id, says, torch, ... typed
        _VALIDATOR = jsonschema.Draft202012Validator(schema)
    return _VALIDATOR


def _index_lines(root: yaml.Node) -> tuple[dict[tuple, int], list[tuple[tuple, str, int]]]:
    """One walk of a composed YAML document: (key path -> 1-based line of every node and every
    key, duplicate keys as (key path, message, line)). YAML keeps the last of two equal keys
    silently; in a spec that would drop a check. Iterative; the tree's depth is bounded by
    :func:`harness.load.yaml_safe.load_text`."""
    index: dict[tuple, int] = {}
    duplicates: list[tuple[tuple, str, int]] = []
    stack: list[tuple[yaml.Node, tuple]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        index.setdefault(path, node.start_mark.line + 1)  # a mapping value's path has its key's line
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key, value in node.value:
                key_path, line = path + (key.value,), key.start_mark.line + 1
                if key.value in seen:
                    duplicates.append(
                        (
                            key_path,
                            f"duplicate key {key.value!r} (first at line {seen[key.value]}); each key once per mapping",
                            line,
                        )
                    )
                else:
                    seen[key.value] = line
                stack.append((value, key_path))
                index[key_path] = line  # a key's own line, not its value's (the last of equal keys)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, path + (i,)) for i, child in enumerate(node.value))
    return index, duplicates


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


def _undotted(key_path: str) -> tuple:
    """``setup.mesh.dim_names`` or ``tables[2].rows[0]`` -> a key tuple (the inverse of _dotted)."""
    return tuple(int(i) if i else k for k, i in re.findall(r"([^.\[\]]+)|\[(\d+)\]", key_path))


def load_spec(path: str | Path) -> Spec:
    """Read, validate and expand one spec file (where the schema fails, that part's entry checks are skipped).

    Raises:
        SpecError: every error at once, one line each: unreadable YAML, schema violation, unknown
            check field or selector, unreadable figure, unknown step name, parameter name, memory
            state or rank, bad setup, bad torch range, duplicate key or entry id.
    """
    path = Path(path)
    if path.is_dir():
        raise SpecError(path, 0, "", f"a folder with no spec file ({' or '.join(SUFFIXES)}) below it")
    try:
        node, data = load_file(path)  # bounded: size, UTF-8, nesting, alias expansion
    except YamlFileError as exc:
        raise SpecError(path, exc.line, "", exc.message) from None
    if node is None or not isinstance(data, dict):
        what = "an empty file" if node is None else f"a {type(data).__name__}"
        raise SpecError(path, 1, "", f"expected a mapping with keys spec, title, document, setup, tables, got {what}")
    index, duplicates = _index_lines(node)
    lines = _Lines(index)
    errors = _Errors(path, lines)
    for key_path, message, line in duplicates:
        errors.add(key_path, message, line=line)

    broken = []  # key paths of schema errors: the entry-level checks skip what is below them
    schema_errors = _schema_errors(data) + _table_form_errors(data)
    schema_errors += [e for e in _non_finite(data) if e[0] not in {k for k, _ in schema_errors}]
    for key, message in schema_errors:
        errors.add(key, message)
        broken.append(key)

    setup, context = None, Context()
    # A mesh the schema refused leaves the world size unknown: the default mesh standing in for it
    # must not make right ranks look outside the world (one wrong type, one error).
    mesh_unknown = any(b[:2] == ("setup", "mesh") for b in broken)
    if isinstance(data.get("setup"), dict) and ("setup",) not in broken:
        # the setup's keys the schema accepted: checked further even when a sibling key is broken
        valid = {k: v for k, v in data["setup"].items() if not any(b[:2] == ("setup", k) for b in broken)}
        valid, problems = resolve_config_file(valid, path)  # setup.model.config: path/to/config.json
        for key_path, message in problems:
            errors.add(_undotted(key_path), message)
        context = Context(world_size=None if mesh_unknown else _world_size(valid))
        try:
            setup = RunSetup.from_mapping(valid)
        except SetupError as exc:
            for key_path, message in exc.errors:
                if not (mesh_unknown and reads_the_mesh(key_path)):
                    errors.add(_undotted(key_path), message)
        calls = [
            (f"setup.schedule.steps[{i}].call", step.call)
            for i, step in enumerate(setup.schedule.steps if setup is not None and setup.schedule is not None else ())
            if step.call is not None
        ]
        if setup is not None:  # unit options that name a function of the hooks file
            fsdp, defaults = setup.fsdp, setup.fsdp.unit_defaults()
            for option in HOOK_OPTION_KEYS:
                calls += [
                    (f"setup.fsdp.units[{i}].{option}", dict(u.given)[option])
                    for i, u in enumerate(fsdp.units or ())
                    if dict(u.given).get(option)
                ]
                if defaults.get(option):
                    calls.append((f"setup.fsdp.{option}", defaults[option]))
        if setup is not None and setup.hooks is not None:  # the file and its names, nothing imported
            hooks, problems = resolve_hooks(setup.hooks, path, calls)
            setup = dataclasses.replace(setup, hooks=hooks)
            for key_path, message in problems:
                errors.add(_undotted(key_path), message)
        elif calls:
            for key_path, name in calls:
                errors.add(
                    _undotted(key_path),
                    f"calling {name!r} needs setup.hooks: {{file: <your hooks>.py}}, the file that defines it",
                )
        config = _check_model_config(errors, valid.get("model", {}))
        if setup is not None:
            try:
                context = _context(setup, config)
            except SetupError as exc:  # units that name no module, a module in two units, ...
                for key_path, message in exc.errors:
                    errors.add(_undotted(key_path), message)
                context = Context(world_size=setup.world_size, mesh_dim_names=setup.observed_mesh_dims)
            if mesh_unknown:
                context = dataclasses.replace(context, world_size=None, mesh_dim_names=())
            # a refused key's value is its default: what the kinds read of it is unknown, not absent
            refused = frozenset(b[1] for b in broken if len(b) >= 2 and b[0] == "setup" and isinstance(b[1], str))
            context = dataclasses.replace(context, refused=refused)
            if setup.schedule is not None and config is not None and context.unit_names is not None:
                for key_path, message in schedule_problems(
                    setup.schedule,
                    body=setup.model.body,
                    num_layers=config.num_hidden_layers,
                    unit_names=context.unit_names,
                ):
                    errors.add(_undotted(key_path), message)

    spec_range = data.get("torch", "")
    if ("torch",) not in broken:
        _check_range(errors, ("torch",), spec_range)
    items: list[SpecItem] = []
    seen_ids: dict[tuple[str, str], int] = {}
    tables = data.get("tables")
    for t_index, table in enumerate(tables if isinstance(tables, list) else []):
        base = ("tables", t_index)
        below = [k[2:] for k in broken if k[:2] == base]
        if not isinstance(table, dict) or any(len(k) < 2 or k[0] not in ("rows", "entries") for k in below):
            continue  # the table's own form is broken; its schema errors say how
        skip = {k[1] for k in below}  # rows or entries the schema rejected
        items.extend(_table_items(errors, lines, t_index, table, spec_range, seen_ids, context, skip))
    backend = "auto" if ("backend",) in broken else data.get("backend", "auto")  # refused: its error says why
    for item in items:  # fields whose value depends on thread timing (declared to vary in harness/contract/fields.py)
        for message in timing_dependent_errors(item.entry, backend):
            errors.add((), message, line=item.entry.line)

    for key_path, item in _replica_dtype_problems(setup, items):
        errors.add(
            _undotted(key_path), f"{item.entry.check} entry {item.entry.id!r}: {_ONE_DTYPE}", line=item.entry.line
        )
    errors.raise_if_any()
    for item in items:  # the build the spec describes gates every entry (schema: cpu or cuda)
        item.torch_build = data.get("torch_build", "")
    turned_on = {k: v for item in items for k, v in REGISTRY[item.entry.check].setup.items()}
    if turned_on:  # what the entries' kinds need of the run (expect_error: a raise is recorded)
        setup = dataclasses.replace(setup, **turned_on)
    return Spec(
        path=path,
        name=data["spec"],
        title=data["title"],
        document=data["document"],
        setup=setup,
        backend=data.get("backend", "auto"),
        timeout_s=float(data.get("timeout_s", 300)),
        raw=data,
        items=items,
    )


_FINITE_KEYS = (("timeout_s",), ("setup", "optimizer", "lr"))


def _non_finite(data: Mapping[str, Any]) -> list[tuple[tuple, str]]:
    """YAML's .nan and .inf pass the schema's number bounds (NaN compares false with anything);
    a NaN timeout would never end a hung run."""
    out = []
    for key in _FINITE_KEYS:
        value: Any = data
        for part in key:
            value = value.get(part) if isinstance(value, Mapping) else None
        if isinstance(value, float) and not math.isfinite(value):
            out.append((key, f"expected a finite number, got {value}"))
    return out


def _world_size(setup: Mapping[str, Any]) -> int:
    size = 1
    for n in setup.get("mesh", {}).get("shape", (4,)):
        size *= n
    return size


def _context(setup: RunSetup, config: Any) -> Context:
    """What entries may select in a run of ``setup`` (``config``: its Qwen3Config, None if invalid)."""
    if config is None:
        return Context(world_size=setup.world_size, mesh_dim_names=setup.observed_mesh_dims, setup=setup.to_dict())
    n = config.num_hidden_layers
    fqns = param_fqns(
        setup.model.body,
        n,
        tie_word_embeddings=config.tie_word_embeddings,
        sparse_layers=getattr(config, "moe_layers", ()),
    )
    problem = expert_config_problem(setup, config)  # before the units, which would name experts it lacks
    if problem:
        raise SetupError("setup.expert_parallel.mesh_dim", problem)
    plans = setup.unit_plan(n, fqns, tuple(getattr(config, "moe_layers", ())))
    problems = tensor_parallel_problems(setup, config, fqns) + expert_parallel_problems(setup, config, plans)
    if problems:
        raise SetupError(*problems[0], errors=problems)
    if (
        config.tie_word_embeddings
        and setup.model.body == "causal_lm"
        and (_owning_unit(plans, "model.embed_tokens") != _owning_unit(plans, "lm_head"))
    ):
        # The first of the two units' fully_shard replaces its module's weight by a DTensor; the
        # other module keeps the original Parameter, so the tie is broken and lm_head.weight is
        # a parameter of its own (specs/tied_embeddings_split_units.yaml).
        fqns = fqns + ("lm_head.weight",)
    microbatches = setup.schedule.microbatches() if setup.schedule is not None else (1,)
    return Context(
        world_size=setup.world_size,
        mesh_dim_names=setup.observed_mesh_dims,
        num_layers=n,
        unit_names=tuple(p.name for p in plans),
        param_fqns=fqns,
        microbatches=microbatches,
        setup=setup.to_dict(),
    )


def _owning_unit(plans: Any, module: str) -> str:
    """The FSDP unit that manages ``module``'s parameters: the unit with the longest module path
    that is ``module`` or one of its parents (the root, path ``""``, holds what no other unit does)."""
    best, owner = -1, ""
    for plan in plans:
        for path in plan.paths:
            if (path == "" or module == path or module.startswith(path + ".")) and len(path) > best:
                best, owner = len(path), plan.name
    return owner


_ONE_DTYPE = (
    "compares with a replica that computes in one dtype (setup.fsdp.mixed_precision's param_dtype, else the "
    "model's), but this unit's own mp_policy gathers and computes in its own: the comparison would be in the wrong "
    "dtype for its parameters; drop the entry or the unit's mp_policy"
)


def _replica_dtype_problems(setup: RunSetup | None, items: list[SpecItem]) -> list[tuple[str, SpecItem]]:
    """(the unit's ``mp_policy`` key path, the entry) for each entry of a replica-comparing kind
    when a unit sets its own ``mp_policy``: the replica (harness/run/rank/build.py) models the
    setup-wide policy only, so those comparisons would be in the wrong dtype (issue 44)."""
    units = setup.fsdp.units if setup is not None and setup.fsdp.units else ()
    own = [f"setup.fsdp.units[{i}].mp_policy" for i, u in enumerate(units) if "mp_policy" in dict(u.given)]
    if not own:
        return []
    return [(own[0], item) for item in items if REGISTRY[item.entry.check].replica]


MAX_LAYERS = 1024
"""Most decoder layers a spec may build (the largest Qwen3, Qwen3-235B-A22B, has 94). Loading
walks every module of every layer (units, parameter names): a million layers took minutes."""


def _check_model_config(errors: _Errors, model: Mapping[str, Any]) -> Any:
    """Build the Qwen3Config now, so a bad model config fails at load, not inside a rank: the named
    (or inline) config is blamed for its own failure, the overrides only when applying them fails;
    over :data:`MAX_LAYERS` decoder layers is refused. Returns the config, None if it fails."""
    config = _build_model_config(errors, model)
    if config is not None and config.num_hidden_layers > MAX_LAYERS:
        key = "overrides" if "num_hidden_layers" in (model.get("overrides") or {}) else "config"
        errors.add(
            ("setup", "model", key),
            f"num_hidden_layers {config.num_hidden_layers:,} is over the "
            f"{MAX_LAYERS:,} decoder layers a spec may build",
        )
        return None
    return config


def _build_model_config(errors: _Errors, model: Mapping[str, Any]) -> Any:
    from model import get_config

    config, overrides = model.get("config", "walkthrough"), model.get("overrides", {})
    config_key, overrides_key = ("setup", "model", "config"), ("setup", "model", "overrides")
    try:
        base = get_config(config)
    except (ValueError, TypeError) as exc:
        message = str(exc)
        if isinstance(config, Mapping) and overrides:  # an inline mapping may take fields from overrides
            try:
                return get_config(config, **overrides)
            except (ValueError, TypeError) as combined:
                message = str(combined)
        errors.add(config_key, message)
        return None
    if overrides:
        try:
            return get_config(base, **overrides)
        except (ValueError, TypeError) as exc:
            errors.add(overrides_key, str(exc))
            return None
    return base


def _schema_errors(data: Any) -> list[tuple[tuple, str]]:
    """Every schema error as (key path, message): the most specific of each, one per unexpected key."""
    out: list[tuple[tuple, str]] = []
    for err in _validator().iter_errors(data):
        err = _most_specific([err])
        key = tuple(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = err.schema.get("properties", {})
            for extra in (k for k in err.instance if k not in allowed):  # point at each unexpected key
                out.append(
                    (
                        key + (extra,),
                        f"Additional properties are not allowed ({extra!r} was unexpected); "
                        f"{did_you_mean(extra, allowed)}allowed keys: {closest_first(extra, sorted(allowed))}",
                    )
                )
        else:
            out.append((key, _schema_message(err)))
    return out


def _table_form_errors(data: Any) -> list[tuple[tuple, str]]:
    """The shipped schema's table ``oneOf`` (columns with rows | entries), checked here: in
    jsonschema every table evaluated both branches and built the errors of the one that failed
    (half of the schema's time in ``validate``)."""
    tables = data.get("tables") if isinstance(data, dict) else None
    out = []
    for i, table in enumerate(tables if isinstance(tables, list) else []):
        if not isinstance(table, dict):
            continue  # the schema says what a table must be
        rows_form = "columns" in table and "rows" in table and "entries" not in table
        entries_form = "entries" in table and "columns" not in table and "rows" not in table
        if not (rows_form or entries_form):
            out.append((("tables", i), TABLE_FORMS))
    return out


TABLE_FORMS = "a table holds either 'columns' with 'rows', or 'entries' (one of the two forms, not both)"


MAX_ENUM_SHOWN = 12
"""Allowed values an error lists before '... N more' (the check kinds are over 30)."""


def _most_specific(errors: list[jsonschema.ValidationError]) -> jsonschema.ValidationError:
    """The deepest error, descending into oneOf/anyOf contexts to the branch that got furthest."""
    err = max(errors, key=lambda e: len(list(e.absolute_path)))
    while err.context:
        err = max(err.context, key=lambda e: len(list(e.absolute_path)))
    return err


def _schema_message(err: jsonschema.ValidationError) -> str:
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        return f"{err.message}; allowed keys: {allowed}"
    if err.validator == "enum":
        values = err.validator_value
        hint = did_you_mean(err.instance, [v for v in values if isinstance(v, str)])
        shown = closest_first(err.instance, values) if hint else values
        if len(shown) > MAX_ENUM_SHOWN:  # a long list would push the bad value past the line's cut
            more = len(shown) - MAX_ENUM_SHOWN
            shown = str(shown[:MAX_ENUM_SHOWN])[:-1] + f", ... {more} more]"
        return f"{hint}expected one of {shown}, got {err.instance!r}"
    if err.validator == "required":
        return err.message
    types = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
    if err.validator == "type" and "object" in types:
        keys = list(err.schema.get("properties", {}))
        if err.schema is _validator().schema["$defs"]["meta_keys"]:  # an entry: its kind's keys are checked apart
            expected = (
                "a mapping of the table's check kind's selectors and fields "
                "(and optionally id, says, torch, deviation, drafted)"
            )
        else:
            expected = f"a mapping with keys {', '.join(keys)}" if keys else "a mapping"
        expected += "".join(f" or {t}" for t in types if t != "object")
        return f"expected {expected}, got {err.instance!r}"
    return f"{err.message} (schema: {err.validator} {json.dumps(err.validator_value, ensure_ascii=False)[:120]})"


def _check_range(errors: _Errors, key: tuple, value: Any) -> None:
    if value == "":
        return
    from packaging.specifiers import InvalidSpecifier, SpecifierSet  # only specs with a torch range (~10 ms)

    try:
        SpecifierSet(value)
    except (InvalidSpecifier, TypeError):
        errors.add(key, f"expected a PEP 440 range like '>=2.6,<2.15', got {value!r}")


def _slug(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "x".join(_slug(v) for v in value)
    if isinstance(value, Mapping):
        return "-".join(f"{k}_{_slug(v)}" for k, v in value.items())
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", str(value)).strip("_")


def _unknown_key(kind: CheckKind, key: Any, *, meta_ok: bool) -> str | None:
    """Why ``key`` is not a selector or field of ``kind`` (None if it is, or is entry metadata)."""
    if meta_ok and key in _ENTRY_META:
        return None
    return kind.unknown_key(key)


def _table_items(
    errors: _Errors,
    lines: _Lines,
    t_index: int,
    table: Mapping[str, Any],
    spec_range: str,
    seen_ids: dict[tuple[str, str], int],
    context: Context,
    skip: set[int],
) -> list[SpecItem]:
    """Expand one table, adding every error to ``errors``; ``seen_ids`` maps (table title, entry id)
    to its line across the spec, since tables sharing a title share a pytest collector and ids
    must stay unique there. ``skip``: rows or entries the schema rejected."""
    base = ("tables", t_index)
    kind = REGISTRY[table["check"]]  # the schema admits registered kinds only
    title = table.get("title", table["section"])
    _check_range(errors, base + ("torch",), table.get("torch", ""))
    # an unknown key of 'with' or 'columns' is reported once, where it is written, not per row
    shared = dict(table.get("with", {}))
    dropped = False
    for key in list(shared):
        message = _unknown_key(kind, key, meta_ok=False)
        if message:
            errors.add(base + ("with", key), message)
            del shared[key]
            dropped = True

    # (entry key, its values, where each of its own values is written, whether a key was dropped)
    raw_entries: list[tuple[tuple, dict, dict, bool]] = []
    if "rows" in table:
        columns = table["columns"]
        bad = set()
        for j, column in enumerate(columns):
            message = _unknown_key(kind, column, meta_ok=True)
            if message:
                errors.add(base + ("columns", j), message)
                bad.add(j)
            elif column in columns[:j]:
                errors.add(base + ("columns", j), f"duplicate column {column!r} (column {columns.index(column)})")
                bad.add(j)
        for r_index, row in enumerate(table["rows"]):
            key = base + ("rows", r_index)
            if r_index in skip:
                continue
            if len(row) != len(columns):
                errors.add(key, f"expected {len(columns)} values for columns {columns}, got {len(row)}")
                continue
            values = {c: v for j, (c, v) in enumerate(zip(columns, row)) if j not in bad}
            where = {c: key + (j,) for j, c in enumerate(columns) if j not in bad}
            raw_entries.append((key, values, where, dropped or bool(bad)))
    else:
        for e_index, entry in enumerate(table["entries"]):
            key = base + ("entries", e_index)
            if e_index in skip:
                continue
            if not isinstance(entry, Mapping):
                errors.add(
                    key,
                    f"expected a mapping of selectors and fields of check kind {kind.name!r} "
                    f"(selectors: {sorted(kind.selector_index)}), got {entry!r}",
                )
                continue
            values, unknown = {}, False
            for k, v in entry.items():
                message = _unknown_key(kind, k, meta_ok=True)
                if message:
                    errors.add(key + (k,), message)
                    unknown = True
                else:
                    values[k] = v
            raw_entries.append((key, values, {k: key + (k,) for k in values}, dropped or unknown))

    items = []
    for key, values, where, some_dropped in raw_entries:
        meta = {k: values.pop(k) for k in _ENTRY_META if k in values}
        merged = {**shared, **values}

        def at(k: str, where: Mapping = where) -> tuple:  # this entry's key paths
            return where.get(k, base + ("with", k))

        ok = True
        entry_id = meta.get("id") or _default_id(kind, values) or f"row{key[-1]}"
        if not isinstance(entry_id, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", entry_id):
            errors.add(at("id"), f"an id is a string of letters, digits, '_', '.' or '-', got {entry_id!r}")
            ok = False
        elif (title, entry_id) in seen_ids:
            errors.add(
                key,
                f"duplicate entry id {entry_id!r} in table {title!r} (first at line {seen_ids[title, entry_id]}); "
                "give one an 'id' or its table another 'title'",
            )
            ok = False
        else:
            seen_ids[title, entry_id] = lines(key)
        if "torch" in meta:
            _check_range(errors, at("torch"), meta["torch"])
        for sub, message in _entry_problems(kind, merged, context, some_dropped):
            errors.add(at(sub) if sub else key, message)
            ok = False
        expect = {}
        for k in (k for k in merged if k not in kind.selector_index and kind.field_named(k) is not None):
            blame = key if k in values else at(k)  # a figure of 'with' once, where it is written
            try:
                expect[k] = parse_expectation(merged[k])
            except ExpectationError as exc:
                errors.add(blame, str(exc))
                ok = False
                continue
            problem = kind.field_named(k).type.problem(expect[k]) or _field_rule(kind, k, expect[k], context)
            if problem:
                errors.add(blame, f"{k}: {problem}")
                ok = False
        if not ok or (some_dropped and not expect):  # the dropped key's error says why there is no field
            continue
        if not expect:
            errors.add(key, f"no expected field; fields of {kind.name!r}: {sorted(kind.field_index)}")
            continue
        entry = Entry(
            id=entry_id,
            check=kind.name,
            selectors={k: v for k, v in merged.items() if k in kind.selector_index},
            expect=expect,
            says=meta.get("says", ""),
            section=table["section"],
            table=title,
            spec=str(errors.path),
            line=lines(key),
            field_lines={k: lines(at(k)) for k in expect},
        )
        ranges = [r for r in (spec_range, table.get("torch", ""), meta.get("torch", "")) if r]
        items.append(SpecItem(entry, ",".join(ranges), meta.get("deviation"), bool(meta.get("drafted"))))
    return items


def _entry_problems(
    kind: CheckKind, values: Mapping[str, Any], context: Context, some_dropped: bool
) -> list[tuple[str | None, str]]:
    """What the schema cannot say about one entry, as (the key to blame, None for the entry; message):
    each selector's rule, then the kind's entry-wide rules, skipped where ``some_dropped`` (a dropped
    unknown key is likely the misspelt required selector, already reported)."""
    out: list[tuple[str | None, str]] = []
    for name, value in values.items():
        selector = kind.selector_index.get(name)
        problem = selector.check(value, context) if selector is not None and selector.check else None
        if problem:
            out.append((name, problem))
    for rule in kind.rules:
        out.extend((k, m) for k, m in rule(values, context) if k is not None or not some_dropped)
    return out


def _field_rule(kind: CheckKind, name: str, expectation: Any, context: Context) -> str | None:
    rule = kind.field_named(name).check
    if rule is None or expectation.form != "exact":
        return None
    return rule(expectation.value, context)


_ID_KEYS = ("param", "fqn", "step", "rank", "module", "unit", "layer", "point", "state", "select")


def _default_id(kind: str, values: Mapping[str, Any]) -> str:
    parts = [f"{k}{_slug(values[k])}" if k in ("rank", "layer") else _slug(values[k]) for k in _ID_KEYS if k in values]
    return "-".join(p for p in parts if p)
