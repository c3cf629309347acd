"""``state_dict_get``: what ``get_model_state_dict(model, options=StateDictOptions(...))`` returned
on each rank after the step (``setup.state_dict.get_model``, ``harness/run/rank/state_dict_options.py``).

An entry names its call (``get: <id>``). With a key (``param`` + ``layer``, or ``fqn``) it checks
that key's tensor: present on the rank, DTensor or plain, device, full and local shape,
placements, dtype, and whether it holds the trained values. Without one it checks the whole
returned dict: how many keys, how many are DTensors, how many hold the trained values, which
devices. ``keys: 0`` on ranks 1-2 pins torch's rank-0-only full state dict under ``cpu_offload``.
"""

from __future__ import annotations

from typing import Any

from harness.language.kinds.common import LAYER
from harness.language.kinds.param import KIND as PARAM
from harness.language.kinds.state_dict_calls import RANKS, call_records, call_selector, entry_rules, one_entry
from harness.language.vocabulary import BOOL, COUNT, DTYPE, SHAPE, TEXT, TEXTS, CheckKind, Field, Reads, Selector

ONE_KEY = ("present", "is_dtensor", "device", "shape", "local_shape", "placements", "dtype", "equal")
WHOLE = ("keys", "dtensors", "equal_entries", "devices")


def measure(sel, obs):
    single = "param" in sel or "fqn" in sel
    out: dict[int, dict[str, Any]] = {}
    for rank, record in call_records(obs, sel, "get_model", sel["get"]):
        if single:
            e = one_entry(record, obs, sel)
            described = {k: (e[k] if e is not None else None) for k in ONE_KEY if k != "present"}
            out[rank] = {"present": e is not None, **described}
            continue
        entries = record["entries"]
        out[rank] = {
            "keys": record["keys"],
            "dtensors": sum(e["is_dtensor"] for e in entries),
            "equal_entries": sum(e["equal"] for e in entries),
            "devices": sorted({e["device"] for e in entries}),
        }
    return out


KIND = CheckKind(
    name="state_dict_get",
    order=150,
    reads=(Reads("state_dict_options.get_model"),),
    doc="get_model_state_dict with StateDictOptions (setup.state_dict.get_model) after the step: per key the "
    "tensor type, device, shapes, placements and values on each rank; the returned dict's size per rank",
    selectors=(
        call_selector("get", "get_model"),
        PARAM.selector_index["param"],
        PARAM.selector_index["fqn"],
        Selector("layer", "decoder layer index (with 'param')", LAYER.check),
        RANKS,
    ),
    fields=(
        Field("present", BOOL, "the returned dict has the key on this rank"),
        Field("is_dtensor", BOOL, "the key's tensor is a DTensor (false: a plain torch.Tensor, e.g. full_state_dict)"),
        Field("device", TEXT, "the (local) tensor's device type: cpu, cuda"),
        Field("shape", SHAPE, "the tensor's shape (a DTensor's global shape)"),
        Field("local_shape", SHAPE, "what this rank holds: a DTensor's local shard, else the tensor's shape"),
        Field("placements", TEXTS, "the DTensor's placements, e.g. ['Shard(dim=0)']; [] for a plain tensor"),
        Field("dtype", DTYPE, "the tensor's dtype"),
        Field(
            "equal",
            BOOL,
            "holds the trained values bitwise: a plain tensor the full parameter (DTensor.full_tensor()), "
            "a DTensor's local shard this rank's shard",
        ),
        Field("keys", COUNT, "keys of the returned dict on this rank (0: an empty dict)"),
        Field("dtensors", COUNT, "returned entries that are DTensors"),
        Field("equal_entries", COUNT, "returned entries holding the trained values bitwise"),
        Field("devices", TEXTS, "device types of the returned entries, sorted ([] for an empty dict)"),
    ),
    measure=measure,
    rules=(entry_rules("get", "state_dict_get", ONE_KEY, WHOLE),),
)
