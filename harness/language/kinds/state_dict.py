"""``state_dict``: the checkpoint round trip after the step, per state-dict entry and rank.

Reads the rank entries' ``state_dict`` record (the run's own world) or a reload's
(``load_world_size``: a world of another size that loaded the same checkpoint), written by
``harness/run/rank/checkpoint.py`` when the setup has ``state_dict: {round_trip: true}``.

An entry names one parameter (``param`` with ``layer``, or ``fqn``) to check its shard: where it
sits in the full tensor (``global_offset``, ``local_length``), what the checkpoint's metadata
holds for it, and whether the fresh model and optimizer hold the saved values after load.
Without a parameter it checks every state-dict entry (of ``layer`` if given) at once: all
equal after load (``round_trip_equal``, ``optimizer_equal``), the largest difference, how many
entries, how many elements this rank holds.
"""

from __future__ import annotations

from typing import Any, Mapping

from harness.language.kinds.common import LAYER
from harness.language.kinds.param import KIND as PARAM
from harness.language.observed import CheckError, param_fqn, select_ranks, unit_names
from harness.language.vocabulary import (
    BOOL,
    COUNT,
    INTS,
    NUMBER,
    SHAPE,
    TEXTS,
    CheckKind,
    Context,
    Field,
    Reads,
    Selector,
)

ONE_ENTRY_FIELDS = (
    "full_shape",
    "local_shape",
    "placements",
    "global_offset",
    "local_length",
    "equal_before_load",
    "optimizer_states",
    "optimizer_equal_before_load",
    "checkpoint_chunks",
    "checkpoint_offsets",
    "checkpoint_lengths",
)
"""Fields that describe one shard: the entry must name one parameter."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def loads(ctx: Context) -> tuple[int, ...] | None:
    """The world sizes the setup's checkpoint is loaded on (the run's own first, then
    ``setup.state_dict.reload_world_sizes``); () without a round trip; None if unknown."""
    setup = ctx.known_setup("state_dict")
    if setup is None:
        return None
    state_dict = setup["state_dict"]
    if not state_dict["round_trip"]:
        return ()
    return None if ctx.world_size is None else (ctx.world_size, *state_dict["reload_world_sizes"])


def _check_load_world_size(value: Any, ctx: Context) -> str | None:
    if not _is_int(value) or value < 1:
        return f"expected a world size (an integer >= 1), got {value!r}"
    world_sizes = loads(ctx)
    if world_sizes:
        if value not in world_sizes:
            own, *others = world_sizes
            return (
                f"the checkpoint is loaded on world size {own} (the run's own)"
                + (f" and on {others} (setup.state_dict.reload_world_sizes)" if others else "")
                + f", not {value}; add it to setup.state_dict.reload_world_sizes to load it there"
            )
    return None


def _check_ranks(value: Any, ctx: Context) -> str | None:
    if value == "all":
        return None
    ranks = value if isinstance(value, list) else [value]
    if not all(_is_int(r) for r in ranks) or any(r < 0 for r in ranks):
        return f"expected a rank >= 0, a list of them, or 'all', got {value!r}"
    return None


def _needs_round_trip(values: Mapping[str, Any], ctx: Context) -> list[tuple[str | None, str]]:
    if loads(ctx) == ():
        return [
            (None, "the setup saves no checkpoint: a 'state_dict' entry needs setup.state_dict: {round_trip: true}")
        ]
    return []


def _ranks_in_loading_world(values: Mapping[str, Any], ctx: Context) -> list[tuple[str | None, str]]:
    """The selected ranks exist in the world that loaded the checkpoint."""
    ranks = values.get("ranks")
    size = values.get("load_world_size", ctx.world_size)
    if ranks in (None, "all") or not _is_int(size) or _check_ranks(ranks, ctx):
        return []
    outside = [r for r in (ranks if isinstance(ranks, list) else [ranks]) if r >= size]
    if outside:
        return [
            (
                "ranks",
                f"rank(s) {outside} outside the world that loads the checkpoint: world size {size}, ranks 0-{size - 1}",
            )
        ]
    return []


def _one_entry_fields_name_one(values: Mapping[str, Any], ctx: Context) -> list[tuple[str | None, str]]:
    if "param" in values and "layer" not in values:
        return [(None, "a 'state_dict' entry names 'param' with its 'layer' (e.g. with: {layer: 0}), or a full 'fqn'")]
    if "param" in values or "fqn" in values:
        return []
    wanted = [f for f in ONE_ENTRY_FIELDS if f in values]
    if wanted:
        return [
            (
                None,
                f"{wanted} describe one parameter's shard: name 'param' with 'layer', or 'fqn' "
                "(without them an entry checks every state-dict entry: round_trip_equal, max_abs_diff, "
                "optimizer_equal, optimizer_max_abs_diff, entries, local_numel)",
            )
        ]
    return []


def _records(obs: Mapping[str, Any], sel: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    """(rank, state_dict record) of the selected ranks of the world that loaded the checkpoint."""
    size = sel.get("load_world_size", obs["environment"]["world_size"])
    if size == obs["environment"]["world_size"]:
        docs = list(obs["ranks"])
        where = "the run"
    else:
        reloads = obs.get("reloads") or []
        found = [r for r in reloads if r["world_size"] == size]
        if not found:
            raise CheckError(
                f"the checkpoint was not loaded on {size} ranks; loaded on: the run's "
                f"{obs['environment']['world_size']} ranks"
                + (f" and {[r['world_size'] for r in reloads]}" if reloads else "")
                + " (reloads need a local launch: a joined run cannot start another world)"
            )
        docs = list(found[0]["ranks"])
        where = f"the reload on {size} ranks"
    out = []
    for doc in select_ranks(docs, sel.get("ranks"), where):
        rank, record = doc["rank"], doc.get("state_dict")
        if record is None:
            raise CheckError(
                f"rank {rank} of {where} recorded no state-dict round trip "
                "(setup.state_dict.round_trip is off, or the run was simulated)"
            )
        out.append((rank, record))
    return out


def _one(record: Mapping[str, Any], fqn: str, rank: int) -> Mapping[str, Any]:
    for e in record["entries"]:
        if e["fqn"] == fqn:
            return e
    raise CheckError(f"rank {rank}: no state-dict entry {fqn!r}; entries: {[e['fqn'] for e in record['entries']][:40]}")


def _max(values: list) -> Any:
    if any(v is None for v in values):
        return None  # a shape mismatch or a non-finite difference: no number holds
    return max(values, default=0.0)


def _describe_one(e: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "full_shape": e["full_shape"],
        "local_shape": e["local_shape"],
        "placements": e["placements"],
        "global_offset": e["global_offset"],
        "local_length": e["local_length"],
        "local_numel": e["local_numel"],
        "equal_before_load": e["equal_before_load"],
        "round_trip_equal": e["round_trip_equal"],
        "max_abs_diff": e["max_abs_diff"],
        "optimizer_equal": all(o["equal"] for o in e["optimizer"]),
        "optimizer_states": [o["name"] for o in e["optimizer"]],
        "optimizer_equal_before_load": [o["name"] for o in e["optimizer"] if o["equal_before_load"]],
        "optimizer_max_abs_diff": _max([o["max_abs_diff"] for o in e["optimizer"]]),
        "checkpoint_chunks": len(e["checkpoint_offsets"]),
        "checkpoint_offsets": e["checkpoint_offsets"],
        "checkpoint_lengths": e["checkpoint_lengths"],
        "entries": 1,
    }


def _describe_all(entries: list[Mapping[str, Any]]) -> dict[str, Any]:
    states = [o for e in entries for o in e["optimizer"]]
    return {
        "local_numel": sum(e["local_numel"] for e in entries),
        "round_trip_equal": all(e["round_trip_equal"] for e in entries),
        "max_abs_diff": _max([e["max_abs_diff"] for e in entries]),
        "optimizer_equal": all(o["equal"] for o in states),
        "optimizer_max_abs_diff": _max([o["max_abs_diff"] for o in states]),
        "entries": len(entries),
    }


def measure(sel, obs):
    single = "param" in sel or "fqn" in sel
    fqn = param_fqn(obs, sel) if single else None
    names = unit_names(obs, {"layer": sel["layer"]}) if "layer" in sel and not single else None
    out = {}
    for rank, record in _records(obs, sel):
        if single:
            out[rank] = _describe_one(_one(record, fqn, rank))
            continue
        entries = list(record["entries"])
        if names is not None:
            entries = [e for e in entries if any(e["fqn"].startswith(f"{n}.") for n in names)]
        if not entries:
            raise CheckError(f"rank {rank}: no state-dict entries selected by {dict(sel)}")
        out[rank] = _describe_all(entries)
    return out


KIND = CheckKind(
    name="state_dict",
    order=140,
    reads=(Reads("reloads"), Reads("state_dict")),
    doc="the torch.distributed.checkpoint round trip after the step (setup.state_dict): each shard's global offset "
    "and length, the checkpoint's chunks, model and optimizer state equal after load",
    selectors=(
        PARAM.selector_index["param"],
        PARAM.selector_index["fqn"],
        Selector(
            "layer",
            "decoder layer index (with 'param'; alone: every entry of that layer), a list of them, or 'all'",
            LAYER.check,
        ),
        Selector("ranks", "which ranks of the loading world must meet the entry (default: all of them)", _check_ranks),
        Selector(
            "load_world_size",
            "the world that loaded the checkpoint: the run's world size (the default) or one "
            "of setup.state_dict.reload_world_sizes",
            _check_load_world_size,
        ),
    ),
    fields=(
        Field(
            "round_trip_equal",
            BOOL,
            "after load the fresh model holds the saved values, bitwise (all selected entries)",
        ),
        Field("max_abs_diff", NUMBER, "largest |loaded - saved| over the selected entries (0 for empty shards)"),
        Field(
            "equal_before_load",
            BOOL,
            "the fresh model's shard already held the saved values before load "
            "(true for an empty shard: then round_trip_equal proves nothing)",
        ),
        Field(
            "optimizer_equal", BOOL, "after load the fresh optimizer holds the saved state (every state entry, bitwise)"
        ),
        Field(
            "optimizer_states",
            TEXTS,
            "the optimizer's state entries of the parameter, e.g. ['exp_avg', 'exp_avg_sq', 'step']",
        ),
        Field(
            "optimizer_equal_before_load",
            TEXTS,
            "the state entries the fresh optimizer already held before load "
            "(their equality after load proves nothing), e.g. ['step']",
        ),
        Field("optimizer_max_abs_diff", NUMBER, "largest |loaded - saved| over the optimizer's state entries"),
        Field("full_shape", SHAPE, "the parameter's full shape"),
        Field("local_shape", SHAPE, "this rank's shard after load"),
        Field("placements", TEXTS, "the loaded DTensor's placements, e.g. ['Shard(dim=0)']"),
        Field(
            "global_offset",
            INTS,
            "where the shard starts in the full tensor, per dim (torch's compute_local_shape_and_global_offset)",
        ),
        Field("local_length", COUNT, "the shard's size along the sharded dim (elements; 0: an empty shard)"),
        Field("local_numel", COUNT, "elements this rank holds (summed over the selected entries)"),
        Field("checkpoint_chunks", COUNT, "chunks the checkpoint's metadata holds for the parameter"),
        Field("checkpoint_offsets", INTS, "those chunks' offsets along the sharded dim, sorted"),
        Field("checkpoint_lengths", INTS, "those chunks' sizes along the sharded dim, in the same order"),
        Field("entries", COUNT, "state-dict entries selected"),
    ),
    measure=measure,
    rules=(_needs_round_trip, _one_entry_fields_name_one, _ranks_in_loading_world),
)
