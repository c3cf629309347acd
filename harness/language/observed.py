"""Reading an observation document (``harness/contract/observation.schema.json``) for the checks.

Pure functions over the JSON document: which ranks, which FSDP unit, which parameter, which
collectives. They raise :class:`CheckError` when the entry names something the observation
does not hold, with what it holds instead.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from harness.calculator import BUSBW_FACTOR_NUMERATOR
from harness.calculator import ring_bytes as calculator_ring_bytes


class CheckError(Exception):
    """The entry cannot be measured on this observation (unknown parameter, no such unit...).

    The message says what was looked for and what exists.
    """


class NotMeasured:
    """A field a run cannot measure, with why (e.g. distinct devices on CPU ranks, which share the
    host's CPU). :func:`harness.judge.checks.check` does not compare it: an entry whose every
    expected field is NotMeasured is skipped with the reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"NotMeasured({self.reason!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NotMeasured) and other.reason == self.reason

    def __hash__(self) -> int:
        return hash(self.reason)


def rank_hosts(obs: Mapping[str, Any]) -> dict[int, str]:
    """Rank -> host name, for the ranks whose environment was recorded (none when simulated)."""
    return {r["rank"]: r["environment"]["host"] for r in obs["ranks"] if r.get("environment")}


def ranks_on_hosts(ranks: Iterable[int], hosts: Mapping[int, str]) -> str:
    """``3 (host node-b)`` or ``0, 1 (host node-a); 5 (host node-c)``: ranks grouped by host name;
    plain ranks without hosts."""
    ranks = sorted(ranks)
    if not hosts or any(r not in hosts for r in ranks):
        return ranks_text(ranks)
    by_host: dict[str, list[int]] = {}
    for r in ranks:
        by_host.setdefault(hosts[r], []).append(r)
    return "; ".join(f"{ranks_text(rs)} (host {host})" for host, rs in by_host.items())


def ranks_text(ranks: Iterable[int]) -> str:
    """``0-5`` for a run of ranks, else ``0, 2, 7``."""
    ranks = sorted(ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


def named_ranks(ranks: Any) -> list[int] | None:
    """The ranks a ``rank``/``ranks`` selector names, as a list; None for None or 'all' (every rank)."""
    if ranks in (None, "all"):
        return None
    return [ranks] if isinstance(ranks, int) else list(ranks)


def rank_docs(obs: Mapping[str, Any], ranks: Any) -> list[Mapping[str, Any]]:
    """The rank entries selected by a ``rank``/``ranks`` selector (None or 'all': every rank).
    CheckError for a selected rank that died (the observation's ``deaths``) or was not observed."""
    wanted = named_ranks(ranks) or []
    for d in obs.get("deaths", ()):
        if d["rank"] in wanted:
            how = f"by {d['signal']}" if d["signal"] else f"with exit code {d['exit_code']}"
            raise CheckError(f"rank {d['rank']} died {how} in phase {d['phase']}: nothing else of it was observed")
    return select_ranks(obs["ranks"], ranks)


def select_ranks(docs: Iterable[Mapping[str, Any]], ranks: Any, where: str | None = None) -> list[Mapping[str, Any]]:
    """The entries of ``docs`` (each with a ``rank``) selected by a ``rank``/``ranks`` selector
    (None or 'all': every one). Raises CheckError naming a selected rank not in ``docs``, and
    ``where`` they are (e.g. "the reload on 3 ranks"; None: the observed ranks)."""
    docs = list(docs)
    wanted = named_ranks(ranks)
    if wanted is None:
        return docs
    by_rank = {d["rank"]: d for d in docs}
    missing = [r for r in wanted if r not in by_rank]
    if missing:
        if where is None:
            raise CheckError(f"rank(s) {missing} not observed; observed ranks: {ranks_text(by_rank)}")
        raise CheckError(f"rank(s) {missing} not in {where}; its ranks: {ranks_text(by_rank)}")
    return [by_rank[r] for r in wanted]


def units(obs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return obs["fsdp_units"]


def unit_name(obs: Mapping[str, Any], *, layer: Any = None, unit: Any = None) -> str:
    """The FSDP unit's module FQN for ``layer=i`` (decoder layer i) or ``unit`` (a name or 'root')."""
    all_units = units(obs)
    if unit is not None:
        if unit == "root":
            for u in all_units:
                if u["role"] == "root":
                    return u["name"]
            raise CheckError("no root FSDP unit in the observation")
        if any(u["name"] == unit for u in all_units):
            return unit
        raise CheckError(f"no FSDP unit named {unit!r}; units: {[u['name'] for u in all_units]}")
    for u in all_units:
        if u["role"] == "layer" and u.get("layer") == layer:
            return u["name"]
    layers = [u.get("layer") for u in all_units if u["role"] == "layer"]
    raise CheckError(f"no FSDP unit for decoder layer {layer!r}; layers: {layers}")


def unit_names(obs: Mapping[str, Any], sel: Mapping[str, Any]) -> set[str] | None:
    """Unit names selected by 'layer'/'unit'/'role' selectors, None when unconstrained."""
    names: set[str] | None = None
    if "layer" in sel:
        layers = sel["layer"]
        if layers == "all":
            chosen = {u["name"] for u in units(obs) if u["role"] == "layer"}
        else:
            layers = layers if isinstance(layers, list) else [layers]
            chosen = {unit_name(obs, layer=i) for i in layers}
        names = chosen
    if "unit" in sel:
        wanted = sel["unit"] if isinstance(sel["unit"], list) else [sel["unit"]]
        chosen = {None if u is None else unit_name(obs, unit=u) for u in wanted}  # None: outside every unit
        names = chosen if names is None else names & chosen
    if "role" in sel:
        chosen = {u["name"] for u in units(obs) if u["role"] == sel["role"]}
        names = chosen if names is None else names & chosen
    return names


def param_fqn(obs: Mapping[str, Any], sel: Mapping[str, Any]) -> str:
    """The FQN an entry names: ``fqn``, or ``param`` inside decoder layer ``layer``."""
    if "fqn" in sel:
        return sel["fqn"]
    prefix = unit_name(obs, layer=sel.get("layer", 0))
    return f"{prefix}.{sel['param']}" if prefix else sel["param"]


def selected_fqns(obs: Mapping[str, Any], sel: Mapping[str, Any]) -> set[str] | None:
    """The parameter FQNs an entry selects: one (``fqn``, or ``param`` in ``layer``), every parameter
    of the units ``layer``/``unit``/``role`` select, or None (every parameter)."""
    if "fqn" in sel or "param" in sel:
        return {param_fqn(obs, sel)}
    names = unit_names(obs, sel)
    if names is None:
        return None
    return {p for u in obs["fsdp_units"] if u["name"] in names for p in u["params"]}


def find_param(rank_doc: Mapping[str, Any], fqn: str) -> Mapping[str, Any]:
    for p in rank_doc["params"]:
        if p["fqn"] == fqn:
            return p
    known = [p["fqn"] for p in rank_doc["params"]][:40]
    raise CheckError(f"rank {rank_doc['rank']} has no parameter {fqn!r}; parameters: {known}")


def common(values: list) -> Any:
    """The value every element shares, else the list itself (None for no elements)."""
    if not values:
        return None
    return values[0] if all(v == values[0] for v in values) else values


def ring_bytes(collective: Mapping[str, Any]) -> int | float:
    """Bytes one rank sends for this recorded collective under the ring model (nccl-tests' busbw basis).

    all-gather / reduce-scatter / all-reduce: :func:`harness.calculator.ring_bytes` of
    S = ``buffer_bytes`` over N = ``group_size``; any other op: S.
    """
    s, n, op = collective["buffer_bytes"], collective["group_size"], collective["op"]
    if op in BUSBW_FACTOR_NUMERATOR:
        return calculator_ring_bytes(op, s, n)
    return s


COLLECTIVE_MATCH_KEYS = (
    "phase",
    "op",
    "dtype",
    "mesh_dim",
    "fsdp_label",
    "hook",
    "group_size",
    "reduce_op",
    "step_index",
    "microbatch",
)
"""Record fields a collectives ``select`` may filter on directly (a value or a list of values)."""


def select_collectives(obs: Mapping[str, Any], rank_doc: Mapping[str, Any], select: Mapping[str, Any]) -> list[dict]:
    """Collectives of one rank matching ``select``.

    Keys: phase, op, dtype, mesh_dim, fsdp_label, hook, group_size, reduce_op, step_index, microbatch (a
    value or a list of values),
    layer (int, list or 'all'), unit (name, 'root', null for none, or list), role ('layer' | 'root'),
    and ``not`` (a mapping of the same keys, excluded).
    """

    def matches(c, sel) -> bool:
        for key in COLLECTIVE_MATCH_KEYS:
            if key in sel:
                allowed = sel[key] if isinstance(sel[key], list) else [sel[key]]
                if c.get(key) not in allowed:
                    return False
        names = unit_names(obs, sel)
        if names is not None and c["unit"] not in names:
            return False
        return True

    chosen = [c for c in rank_doc["collectives"] if matches(c, select)]
    if "not" in select:
        chosen = [c for c in chosen if not matches(c, select["not"])]
    return chosen
