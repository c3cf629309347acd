"""What ``state_dict_get`` and ``state_dict_set`` share: the ``<call id>`` selector, ``ranks``,
the rule splitting one-key fields from whole-dict fields, and reading a call's records.

Both read the rank entries' ``state_dict_options`` record (``harness/run/rank/state_dict_options.py``),
written when ``setup.state_dict`` lists ``get_model`` / ``set_model`` calls.
"""

from __future__ import annotations

from typing import Any, Mapping

from harness.language.kinds.state_dict import KIND as STATE_DICT
from harness.language.observed import CheckError, param_fqn, select_ranks
from harness.language.vocabulary import Context, EntryRule, Selector

RANKS = Selector(
    "ranks",
    "which ranks must meet the entry: a rank, a list of them or 'all' (default)",
    STATE_DICT.selector_index["ranks"].check,
)


def call_ids(ctx: Context, setup_key: str) -> tuple[str, ...] | None:
    """The ids of ``setup.state_dict.<setup_key>``'s calls (() when there are none), or None if unknown."""
    setup = ctx.known_setup("state_dict")
    return None if setup is None else tuple(c["id"] for c in setup["state_dict"][setup_key])


def call_selector(name: str, setup_key: str) -> Selector:
    """The selector naming one ``setup.state_dict.<setup_key>`` call by its id."""

    def check(value: Any, ctx: Context) -> str | None:
        ids = call_ids(ctx, setup_key)
        if not isinstance(value, str):
            return f"expected the id of one of setup.state_dict.{setup_key}, got {value!r}"
        if ids == ():
            return f"the setup makes no {setup_key} calls: add setup.state_dict.{setup_key}: [{{id: {value}, ...}}]"
        if ids is not None and value not in ids:
            return f"no setup.state_dict.{setup_key} call with id {value!r}; ids: {list(ids)}"
        return None

    return Selector(name, f"the id of the setup.state_dict.{setup_key} call to read (required)", check)


def entry_rules(selector: str, kind: str, one_key: tuple[str, ...], whole: tuple[str, ...]) -> EntryRule:
    """The call selector is required; ``one_key`` fields need ``param`` + ``layer`` or ``fqn``,
    ``whole`` fields refuse them."""

    def rule(values: Mapping[str, Any], ctx: Context) -> list[tuple[str | None, str]]:
        if selector not in values:
            return [(None, f"a {kind!r} entry names its call: {selector}: <id of the call>")]
        if "param" in values and "layer" not in values:
            return [
                (None, f"a {kind!r} entry names 'param' with its 'layer' (e.g. with: {{layer: 0}}), or a full 'fqn'")
            ]
        ranks = values.get("ranks")
        listed = ranks if isinstance(ranks, list) else [ranks]
        if ctx.world_size is not None and ranks != "all" and all(isinstance(r, int) for r in listed):
            outside = [r for r in listed if r >= ctx.world_size]
            if outside:
                return [("ranks", f"rank(s) {outside} outside the world: ranks 0-{ctx.world_size - 1}")]
        single = "param" in values or "fqn" in values
        wrong = [f for f in (whole if single else one_key) if f in values]
        if not wrong:
            return []
        if single:
            return [
                (
                    None,
                    f"{wrong} describe the whole state dict: leave out 'param' and 'fqn' "
                    f"(one key's fields: {list(one_key)})",
                )
            ]
        return [
            (None, f"{wrong} describe one key: name 'param' with 'layer', or 'fqn' (whole-dict fields: {list(whole)})")
        ]

    return rule


def call_records(obs: Mapping[str, Any], sel: Mapping[str, Any], part: str, call_id: str) -> list[tuple[int, dict]]:
    """(rank, that call's record) for the selected ranks."""
    out = []
    for doc in select_ranks(obs["ranks"], sel.get("ranks"), "the run"):
        rank, record = doc["rank"], doc.get("state_dict_options")
        if record is None:
            raise CheckError(
                f"rank {rank} recorded no state-dict calls (setup.state_dict.{part} is empty, or the run was simulated)"
            )
        found = [c for c in record[part] if c["id"] == call_id]
        if not found:
            raise CheckError(f"rank {rank}: no {part} call {call_id!r}; calls: {[c['id'] for c in record[part]]}")
        out.append((rank, found[0]))
    return out


def one_entry(record: Mapping[str, Any], obs: Mapping[str, Any], sel: Mapping[str, Any]) -> "Mapping[str, Any] | None":
    """The record's entry for the key the entry names (None: the state dict has no such key)."""
    fqn = param_fqn(obs, sel)
    return next((e for e in record["entries"] if e["fqn"] == fqn), None)
