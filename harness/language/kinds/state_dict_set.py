"""``state_dict_set``: what ``set_model_state_dict(fresh model, state dict,
options=StateDictOptions(...))`` did on each rank after the step (``setup.state_dict.set_model``,
``harness/run/rank/state_dict_options.py``).

An entry names its call (``set: <id>``). Without a key it checks the call: what it raised
(``error``, ``error_type``; null when it returned), the missing and unexpected keys it returned,
how many keys this rank handed over, which parameters and buffers of the fresh model are still
on the meta device, how many keys hold the trained values afterwards, and whether FSDP's own
all-gather of the loaded shards gives back the trained parameters (``gathered``,
``gathered_equal_entries``), compared in the dtype each unit gathers in (``gathered_dtype``). With a key (``param`` +
``layer``, or ``fqn``) it checks what the fresh model holds for it: DTensor or plain, device,
local shape, placements, the trained values (and whether it already did before the call).
"""

from __future__ import annotations

from typing import Any

from harness.language.kinds.common import LAYER
from harness.language.kinds.param import KIND as PARAM
from harness.language.kinds.state_dict_calls import RANKS, call_records, call_selector, entry_rules, one_entry
from harness.language.observed import CheckError, param_fqn
from harness.language.vocabulary import (
    BOOL,
    COUNT,
    MESSAGE,
    OPTIONAL_TEXT,
    SHAPE,
    TEXT,
    TEXTS,
    CheckKind,
    Field,
    Reads,
    Selector,
)

ONE_KEY = (
    "is_dtensor",
    "device",
    "local_shape",
    "placements",
    "equal",
    "equal_before_load",
    "gathered_equal",
    "gathered_dtype",
)
WHOLE = (
    "error",
    "error_type",
    "missing_keys",
    "unexpected_keys",
    "given_keys",
    "meta_params",
    "meta_buffers",
    "equal_entries",
    "entries",
    "gathered",
    "gathered_equal_entries",
    "gathered_dtypes",
)


def measure(sel, obs):
    single = "param" in sel or "fqn" in sel
    out: dict[int, dict[str, Any]] = {}
    for rank, record in call_records(obs, sel, "set_model", sel["set"]):
        if single:
            e = one_entry(record, obs, sel)
            if e is None:
                raise CheckError(f"rank {rank}: the fresh model has no state-dict key {param_fqn(obs, sel)!r}")
            out[rank] = {k: e[k] for k in ONE_KEY}
            continue
        error = record["error"]
        out[rank] = {
            "error": error["message"] if error else None,
            "error_type": error["type"] if error else None,
            "missing_keys": record["missing_keys"],
            "unexpected_keys": record["unexpected_keys"],
            "given_keys": record["given_keys"],
            "meta_params": record["meta_params"],
            "meta_buffers": record["meta_buffers"],
            "equal_entries": sum(e["equal"] for e in record["entries"]),
            "entries": len(record["entries"]),
            "gathered": record["gathered"],
            "gathered_equal_entries": sum(bool(e["gathered_equal"]) for e in record["entries"]),
            "gathered_dtypes": sorted({e["gathered_dtype"] for e in record["entries"] if e["gathered_dtype"]}),
        }
    return out


KIND = CheckKind(
    name="state_dict_set",
    order=160,
    reads=(Reads("state_dict_options.set_model"),),
    doc="set_model_state_dict with StateDictOptions into a fresh sharded or meta model (setup.state_dict.set_model) "
    "after the step: what it raised or returned (missing/unexpected keys), what the fresh model holds per key",
    selectors=(
        call_selector("set", "set_model"),
        PARAM.selector_index["param"],
        PARAM.selector_index["fqn"],
        Selector("layer", "decoder layer index (with 'param')", LAYER.check),
        RANKS,
    ),
    fields=(
        Field("error", MESSAGE, "the message set_model_state_dict raised on this rank; null: it returned"),
        Field("error_type", MESSAGE, "the exception's class name, e.g. RuntimeError; null: it returned"),
        Field("missing_keys", TEXTS, "the missing keys it returned, sorted (null when it raised)"),
        Field("unexpected_keys", TEXTS, "the unexpected keys it returned, sorted (null when it raised)"),
        Field("given_keys", COUNT, "keys this rank handed over (0 on ranks other than 0 with broadcast_from_rank0)"),
        Field("meta_params", TEXTS, "parameters of the fresh model still on the meta device afterwards"),
        Field("meta_buffers", TEXTS, "buffers of the fresh model still on the meta device afterwards"),
        Field("equal_entries", COUNT, "keys of the fresh model holding the trained values bitwise afterwards"),
        Field("entries", COUNT, "keys of the fresh model's state dict"),
        Field(
            "gathered",
            BOOL,
            "FSDP's all-gather ran on the fresh model afterwards (FSDPModule.unshard() on every unit): only where "
            "the call returned on every rank and no parameter was left on meta",
        ),
        Field(
            "gathered_equal_entries",
            COUNT,
            "parameters that all-gather gave back bitwise as trained, each compared in the dtype its unit gathers in",
        ),
        Field(
            "gathered_dtypes",
            TEXTS,
            "the dtypes of the unsharded parameters that all-gather gave, sorted, each once ([] when not gathered)",
        ),
        Field("is_dtensor", BOOL, "the fresh model's tensor for the key is a DTensor"),
        Field("device", TEXT, "its (local) device type: cpu, cuda, meta"),
        Field("local_shape", SHAPE, "this rank's local shard of it"),
        Field("placements", TEXTS, "its placements, e.g. ['Shard(dim=0)']"),
        Field("equal", BOOL, "its local shard is bitwise the trained model's shard on this rank"),
        Field(
            "equal_before_load",
            BOOL,
            "it already was before the call (true for an empty shard; false on meta): then equal proves nothing",
        ),
        Field(
            "gathered_equal",
            BOOL,
            "FSDP's all-gather of the loaded shards gave back the trained full parameter bitwise, compared in the "
            "dtype the unit gathers in: the trained value cast to its MixedPrecisionPolicy's param_dtype, as the "
            "all-gather casts each shard (null: not gathered)",
        ),
        Field(
            "gathered_dtype",
            OPTIONAL_TEXT,
            "the dtype of the unsharded parameter that all-gather gave, e.g. bfloat16 under param_dtype=bfloat16: "
            "the dtype gathered_equal compared in (null: not gathered)",
        ),
    ),
    measure=measure,
    rules=(entry_rules("set", "state_dict_set", ONE_KEY, WHOLE),),
)
