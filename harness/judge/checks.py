"""Checks: pure functions of (spec entry, observation document) -> result.

Each check kind reads one part of the observation document (harness/schemas/
observation.schema.json) and measures named fields per rank. An entry names the fields it
expects; every selected rank must meet every expectation. Nothing here launches ranks or
touches torch: checks are testable on a hand-written observation.

Kinds and their fields (selectors in parentheses):

* ``param`` (param + layer, or fqn; ranks): full_shape, local_shape, numel, local_numel,
  dtype, element_size, bytes, local_bytes, is_dtensor, placements, mesh_dim_names.
* ``params_total`` (layer | unit | all; ranks): count, numel, local_numel, bytes, local_bytes.
* ``input`` (rank): name, shape, dtype, samples.
* ``step`` (step; layer: int | list | all; ranks): shape, dtype, dim0.
* ``param_state`` (layer | unit; point: pre_forward | post_forward; ranks): count, plain_tensors,
  dtensors, full_shapes, local_shapes, bytes.
* ``collectives`` (select; ranks): count, op, dtype, numel_in, numel_out, buffer_bytes,
  ring_bytes, group_size, mesh_dim, fsdp_label, unit, total_buffer_bytes, total_ring_bytes,
  sequence.
* ``memory`` (module | layer; state; ranks): any FSDPMemTracker category (sharded_param,
  unsharded_param, sharded_grad, unsharded_grad, optstate, all_gather, ...).
* ``numerics`` (ranks): forward_max_abs_diff, forward_rel_diff, grads_max_abs_diff,
  grads_rel_diff, grads_count, loss_max_abs_diff.

Byte figures for collectives follow nccl-tests: ``buffer_bytes`` is S, the full buffer
(all-gather output, reduce-scatter input, all-reduce buffer); ``ring_bytes`` is what each
rank sends under the ring model: S x (N-1)/N for all-gather and reduce-scatter,
2 x S x (N-1)/N for all-reduce, with N the process-group size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from harness.load.expect import Expectation, parse_expectation

FieldValues = dict[str, Any]


class CheckError(Exception):
    """The entry cannot be measured on this observation (unknown parameter, no such unit...).

    The message says what was looked for and what exists.
    """


@dataclass(frozen=True)
class Entry:
    """One spec entry, ready to check.

    Attributes:
        id: readable id, unique within its table.
        kind: check kind (module docstring).
        selectors: which part of the observation (param, layer, select, ranks, ...).
        expect: field name -> Expectation.
        says: the document's words for this entry ('' if the spec gives none).
        section: the document section (heading) the table encodes.
        table: the table's title.
        spec: spec file path; line: 1-based line of the entry in it.
    """

    id: str
    kind: str
    selectors: Mapping[str, Any]
    expect: Mapping[str, Expectation]
    says: str = ""
    section: str = ""
    table: str = ""
    spec: str = ""
    line: int = 0


@dataclass
class FieldResult:
    """One field's outcome: expected, observed per rank, and the ranks that failed."""

    field: str
    expected: str
    observed: dict[int, str]
    failed_ranks: list[int]

    @property
    def ok(self) -> bool:
        return not self.failed_ranks

    def observed_text(self) -> str:
        """Each distinct value with the ranks that observed it: ``[74] (ranks 0-5); [68] (rank 6)``."""
        by_value: dict[str, list[int]] = {}
        for rank, value in self.observed.items():
            by_value.setdefault(value, []).append(rank)
        shown = [f"{v} (rank{'s' if len(rs) > 1 else ''} {_ranks(rs)})" for v, rs in list(by_value.items())[:8]]
        if len(by_value) > 8:
            shown.append(f"... {len(by_value) - 8} more values")
        return "; ".join(shown)


@dataclass
class CheckResult:
    """An entry's outcome. status: 'pass', 'fail', 'error' (could not measure) or 'skip'."""

    entry: Entry
    status: str
    fields: list[FieldResult] = field(default_factory=list)
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "skip", "xfail")

    def explain(self) -> str:
        """Multi-line text for a failure: where it comes from, expected vs observed."""
        e = self.entry
        lines = [f"{e.spec}:{e.line}: [{e.table or e.section}] {e.id}"]
        if e.section:
            lines.append(f"  document section: {e.section}")
        if e.says:
            lines.append(f"  document says:    {e.says}")
        if self.message:
            lines.append(f"  {self.status}: {self.message}")
        for f in self.fields:
            mark = "ok  " if f.ok else "FAIL"
            lines.append(f"  {mark} {f.field}: expected {f.expected}; observed {f.observed_text()}")
            if not f.ok:
                lines.append(f"       failing ranks: {_ranks(dict.fromkeys(f.failed_ranks))}")
        return "\n".join(lines)


def _ranks(ranks: Iterable[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


# --- helpers over the observation -------------------------------------------------------

def _rank_docs(obs: Mapping[str, Any], ranks: Any) -> list[Mapping[str, Any]]:
    docs = obs["ranks"]
    if ranks in (None, "all"):
        return list(docs)
    wanted = [ranks] if isinstance(ranks, int) else list(ranks)
    by_rank = {d["rank"]: d for d in docs}
    missing = [r for r in wanted if r not in by_rank]
    if missing:
        raise CheckError(f"rank(s) {missing} not observed; observed ranks: {_ranks(by_rank)}")
    return [by_rank[r] for r in wanted]


def _units(obs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return obs["fsdp_units"]


def unit_name(obs: Mapping[str, Any], *, layer: Any = None, unit: Any = None) -> str:
    """The FSDP unit's module FQN for ``layer=i`` (decoder layer i) or ``unit`` (a name or 'root')."""
    units = _units(obs)
    if unit is not None:
        if unit == "root":
            for u in units:
                if u["kind"] == "root":
                    return u["name"]
            raise CheckError("no root FSDP unit in the observation")
        if any(u["name"] == unit for u in units):
            return unit
        raise CheckError(f"no FSDP unit named {unit!r}; units: {[u['name'] for u in units]}")
    for u in units:
        if u["kind"] == "layer" and u.get("layer") == layer:
            return u["name"]
    layers = [u.get("layer") for u in units if u["kind"] == "layer"]
    raise CheckError(f"no FSDP unit for decoder layer {layer!r}; layers: {layers}")


def _unit_names(obs: Mapping[str, Any], sel: Mapping[str, Any]) -> set[str] | None:
    """Unit names selected by 'layer'/'unit'/'kind' selectors, None when unconstrained."""
    names: set[str] | None = None
    if "layer" in sel:
        layers = sel["layer"]
        if layers == "all":
            chosen = {u["name"] for u in _units(obs) if u["kind"] == "layer"}
        else:
            layers = layers if isinstance(layers, list) else [layers]
            chosen = {unit_name(obs, layer=i) for i in layers}
        names = chosen
    if "unit" in sel:
        units = sel["unit"] if isinstance(sel["unit"], list) else [sel["unit"]]
        chosen = {unit_name(obs, unit=u) for u in units}
        names = chosen if names is None else names & chosen
    if "kind" in sel:
        chosen = {u["name"] for u in _units(obs) if u["kind"] == sel["kind"]}
        names = chosen if names is None else names & chosen
    return names


def _fqn(obs: Mapping[str, Any], sel: Mapping[str, Any]) -> str:
    if "fqn" in sel:
        return sel["fqn"]
    prefix = unit_name(obs, layer=sel.get("layer", 0))
    return f"{prefix}.{sel['param']}" if prefix else sel["param"]


def _find_param(rank_doc: Mapping[str, Any], fqn: str) -> Mapping[str, Any]:
    for p in rank_doc["params"]:
        if p["fqn"] == fqn:
            return p
    known = [p["fqn"] for p in rank_doc["params"]][:40]
    raise CheckError(f"rank {rank_doc['rank']} has no parameter {fqn!r}; parameters: {known}")


def _prod(shape: Iterable[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def ring_bytes(collective: Mapping[str, Any]) -> float:
    """Bytes one rank sends for this collective under the ring model (nccl-tests' busbw basis).

    all-gather / reduce-scatter: S x (N-1)/N; all-reduce: 2 x S x (N-1)/N; others: S.
    S = ``buffer_bytes``, N = ``group_size``.
    """
    s, n = collective["buffer_bytes"], collective["group_size"]
    if collective["op"] in ("all_gather", "reduce_scatter"):
        return s * (n - 1) / n
    if collective["op"] == "all_reduce":
        return 2 * s * (n - 1) / n
    return float(s)


# --- measurements per kind: (selectors, observation) -> {rank: {field: value}} -----------

def _measure_param(sel, obs):
    fqn = _fqn(obs, sel)
    out = {}
    for r in _rank_docs(obs, sel.get("ranks")):
        p = _find_param(r, fqn)
        out[r["rank"]] = {
            **{k: p[k] for k in ("full_shape", "local_shape", "numel", "local_numel", "dtype",
                                  "element_size", "is_dtensor", "placements", "mesh_dim_names")},
            "bytes": p["numel"] * p["element_size"],
            "local_bytes": p["local_numel"] * p["element_size"],
        }
    return out


def _params_of(obs, sel, rank_doc):
    names = _unit_names(obs, sel)
    params = rank_doc["params"]
    if names is not None:
        params = [p for p in params if p["unit"] in names]
    if not params:
        raise CheckError(f"no parameters selected by {dict(sel)}")
    return params


def _measure_params_total(sel, obs):
    out = {}
    for r in _rank_docs(obs, sel.get("ranks")):
        params = _params_of(obs, sel, r)
        out[r["rank"]] = {
            "count": len(params),
            "numel": sum(p["numel"] for p in params),
            "local_numel": sum(p["local_numel"] for p in params),
            "bytes": sum(p["numel"] * p["element_size"] for p in params),
            "local_bytes": sum(p["local_numel"] * p["element_size"] for p in params),
        }
    return out


def _measure_input(sel, obs):
    return {r["rank"]: dict(r["input"]) for r in _rank_docs(obs, sel.get("rank", sel.get("ranks")))}


def _measure_step(sel, obs):
    name = sel["step"]
    layers = sel.get("layer", "all")
    out = {}
    for r in _rank_docs(obs, sel.get("ranks")):
        found = [s for s in r["steps"] if s["name"] == name and (layers == "all" or s["layer"] in
                 (layers if isinstance(layers, list) else [layers]))]
        if not found:
            names = sorted({s["name"] for s in r["steps"]})
            raise CheckError(f"rank {r['rank']}: step {name!r} (layer {layers}) not observed; observed steps: {names}")
        # one value when every selected layer agrees, else the per-layer values (a failure shows them)
        out[r["rank"]] = {
            "shape": _common([s["shape"] for s in found]),
            "dtype": _common([s["dtype"] for s in found]),
            "dim0": _common([s["shape"][0] for s in found]),
            "layers": len(found),
        }
    return out


def _measure_param_state(sel, obs):
    units = _unit_names(obs, sel)
    point = sel["point"]
    out = {}
    for r in _rank_docs(obs, sel.get("ranks")):
        states = [s for s in r["param_states"] if s["point"] == point and (units is None or s["unit"] in units)]
        if not states:
            raise CheckError(f"rank {r['rank']}: no param state at {point!r} for units {sorted(units or [])}")
        full = {p["fqn"]: p["full_shape"] for p in r["params"]}
        local = {p["fqn"]: p["local_shape"] for p in r["params"]}
        per_unit = []
        for state in states:
            ps = state["params"]
            per_unit.append({
                "count": len(ps),
                "plain_tensors": sum(not p["is_dtensor"] for p in ps),
                "dtensors": sum(p["is_dtensor"] for p in ps),
                "full_shapes": all(p["shape"] == full.get(p["fqn"]) for p in ps),
                "local_shapes": all(p["shape"] == local.get(p["fqn"]) for p in ps),
                "bytes": state["bytes"],
            })
        # several units (layer: all): a field's common value, or the per-unit list when they differ
        out[r["rank"]] = {k: _common([u[k] for u in per_unit]) for k in per_unit[0]}
    return out


def _common(values: list) -> Any:
    """The value every element shares, else the list itself (None for no elements)."""
    if not values:
        return None
    return values[0] if all(v == values[0] for v in values) else values


_COLLECTIVE_FIELDS = ("op", "dtype", "numel_in", "numel_out", "buffer_bytes", "group_size",
                      "mesh_dim", "fsdp_label", "hook", "unit", "phase", "element_size")


def select_collectives(obs: Mapping[str, Any], rank_doc: Mapping[str, Any], select: Mapping[str, Any]) -> list[dict]:
    """Collectives of one rank matching ``select``.

    Keys: phase, op, dtype, mesh_dim, fsdp_label, hook, group_size (a value or a list of values),
    layer (int, list or 'all'), unit (name, 'root' or list), kind ('layer' | 'root'),
    and ``not`` (a mapping of the same keys, excluded).
    """
    def matches(c, sel) -> bool:
        for key in ("phase", "op", "dtype", "mesh_dim", "fsdp_label", "hook", "group_size"):
            if key in sel:
                allowed = sel[key] if isinstance(sel[key], list) else [sel[key]]
                if c.get(key) not in allowed:
                    return False
        names = _unit_names(obs, sel)
        if names is not None and c["unit"] not in names:
            return False
        return True

    chosen = [c for c in rank_doc["collectives"] if matches(c, select)]
    if "not" in select:
        chosen = [c for c in chosen if not matches(c, select["not"])]
    return chosen


def _unit_label(unit: str | None) -> str:
    """How a sequence names a collective's unit: its FQN, 'root' for the root ('') and '-' for none."""
    if unit is None:
        return "-"
    return unit or "root"


def _measure_collectives(sel, obs):
    select = sel.get("select", {})
    out = {}
    for r in _rank_docs(obs, sel.get("ranks")):
        cs = select_collectives(obs, r, select)
        values: FieldValues = {
            "count": len(cs),
            "total_buffer_bytes": sum(c["buffer_bytes"] for c in cs),
            "total_ring_bytes": sum(ring_bytes(c) for c in cs),
            "sequence": [f"{c['op']} {_unit_label(c['unit'])}" for c in cs],
        }
        # per-collective fields: the common value, or the list when they differ
        for key in _COLLECTIVE_FIELDS + ("ring_bytes",):
            vals = [ring_bytes(c) if key == "ring_bytes" else c.get(key) for c in cs]
            values[key] = _common(vals)
        out[r["rank"]] = values
    return out


def _measure_memory(sel, obs):
    module = sel["module"] if "module" in sel else unit_name(obs, layer=sel.get("layer"), unit=sel.get("unit"))
    state = sel["state"]
    out = {}
    for r in _rank_docs(obs, sel.get("ranks")):
        snaps = [m for m in r["memory"] if m["module"] == module and m["state"] == state]
        if not snaps:
            states = sorted({m["state"] for m in r["memory"] if m["module"] == module})
            raise CheckError(f"rank {r['rank']}: no memory snapshot {state!r} for module {module!r}; states: {states}")
        out[r["rank"]] = dict(snaps[0]["bytes"])
    return out


def _measure_numerics(sel, obs):
    out = {}
    for r in _rank_docs(obs, sel.get("ranks")):
        n = r["numerics"]
        if n is None:
            raise CheckError(f"rank {r['rank']}: no numerics recorded (simulated run)")
        grads = n["grads"]
        worst = max(grads, key=lambda g: g["max_abs_diff"]) if grads else None
        out[r["rank"]] = {
            "forward_max_abs_diff": n["forward_output"]["max_abs_diff"],
            "forward_rel_diff": _rel(n["forward_output"]),
            "grads_max_abs_diff": worst["max_abs_diff"] if worst else 0.0,
            "grads_rel_diff": max((_rel(g) for g in grads), default=0.0),
            "grads_count": len(grads),
            "loss_max_abs_diff": (n.get("loss") or {}).get("max_abs_diff"),
            "replica_dtype": n["replica_dtype"],
        }
    return out


def _rel(diff: Mapping[str, float]) -> float:
    ref = diff["max_abs_ref"]
    return diff["max_abs_diff"] / ref if ref else diff["max_abs_diff"]


MEASURES: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], dict[int, FieldValues]]] = {
    "param": _measure_param,
    "params_total": _measure_params_total,
    "input": _measure_input,
    "step": _measure_step,
    "param_state": _measure_param_state,
    "collectives": _measure_collectives,
    "memory": _measure_memory,
    "numerics": _measure_numerics,
}

SELECTORS: dict[str, frozenset[str]] = {
    "param": frozenset({"param", "fqn", "layer", "ranks"}),
    "params_total": frozenset({"layer", "unit", "kind", "ranks"}),
    "input": frozenset({"rank", "ranks"}),
    "step": frozenset({"step", "layer", "ranks"}),
    "param_state": frozenset({"layer", "unit", "point", "ranks"}),
    "collectives": frozenset({"select", "ranks"}),
    "memory": frozenset({"module", "layer", "unit", "state", "ranks"}),
    "numerics": frozenset({"ranks"}),
}

FIELDS: dict[str, frozenset[str] | None] = {
    "param": frozenset({"full_shape", "local_shape", "numel", "local_numel", "dtype", "element_size",
                        "bytes", "local_bytes", "is_dtensor", "placements", "mesh_dim_names"}),
    "params_total": frozenset({"count", "numel", "local_numel", "bytes", "local_bytes"}),
    "input": frozenset({"name", "shape", "dtype", "samples"}),
    "step": frozenset({"shape", "dtype", "dim0", "layers"}),
    "param_state": frozenset({"count", "plain_tensors", "dtensors", "full_shapes", "local_shapes", "bytes"}),
    "collectives": frozenset(set(_COLLECTIVE_FIELDS) | {"count", "ring_bytes", "total_buffer_bytes",
                                                         "total_ring_bytes", "sequence"}),
    "memory": None,  # any FSDPMemTracker category
    "numerics": frozenset({"forward_max_abs_diff", "forward_rel_diff", "grads_max_abs_diff",
                           "grads_rel_diff", "grads_count", "loss_max_abs_diff", "replica_dtype"}),
}


def make_entry(kind: str, values: Mapping[str, Any], *, id: str, says: str = "", section: str = "",
               table: str = "", spec: str = "", line: int = 0) -> Entry:
    """Split an entry's mapping into selectors and expected fields.

    Raises:
        ValueError: unknown kind, a key that is neither a selector nor a field of the kind,
            no expected field, or an unreadable figure (ExpectationError).
    """
    if kind not in MEASURES:
        raise ValueError(f"unknown check kind {kind!r}; expected one of {sorted(MEASURES)}")
    selectors, expect = {}, {}
    fields = FIELDS[kind]
    for key, value in values.items():
        if key in SELECTORS[kind]:
            selectors[key] = value
        elif fields is None or key in fields:
            expect[key] = parse_expectation(value)
        else:
            raise ValueError(
                f"{key!r} is not a selector or field of check kind {kind!r}; "
                f"selectors: {sorted(SELECTORS[kind])}; fields: {sorted(fields)}"
            )
    if not expect:
        raise ValueError(f"no expected field; fields of {kind!r}: {sorted(fields) if fields else 'any memory category'}")
    return Entry(id=id, kind=kind, selectors=selectors, expect=expect, says=says, section=section,
                 table=table, spec=spec, line=line)


def check(entry: Entry, observation: Mapping[str, Any]) -> CheckResult:
    """Measure ``entry`` on ``observation`` and compare every expected field on every selected rank.

    Returns a CheckResult with status 'pass', 'fail', or 'error' (CheckError: the entry could
    not be measured, e.g. a parameter that does not exist). Never raises CheckError.
    """
    try:
        measured = MEASURES[entry.kind](entry.selectors, observation)
    except CheckError as exc:
        return CheckResult(entry, "error", message=str(exc))
    results = []
    for name, expectation in entry.expect.items():
        observed, failed = {}, []
        for rank, values in measured.items():
            if name not in values:
                return CheckResult(entry, "error", message=f"rank {rank}: field {name!r} not observed; fields: {sorted(values)}")
            observed[rank] = expectation.show_observed(values[name])
            if not expectation.holds(values[name]):
                failed.append(rank)
        results.append(FieldResult(name, expectation.describe(), observed, failed))
    status = "pass" if all(f.ok for f in results) else "fail"
    return CheckResult(entry, status, results)
