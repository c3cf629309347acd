"""The walkthrough document's tables, regenerated from a run: (spec, observation) -> Markdown.

:func:`render_markdown` lays out an observation document (``harness/contract/observation.schema.json``)
as the tables of *FSDP2 Qwen3 Decoder Layer Walkthrough* for every FSDP unit: configuration,
parameters, shards and inputs on each rank, forward Steps 0-11, between layers, backward, mixed
precision, memory, and communication per unit per step (the sum of what each layer really sends).

Units built and observed the same share a table; a heading names the document section it
regenerates only where the spec's own tables cite it. Figures are printed the document's way
(``harness.report.figures``; MB = 10^6 bytes) with the exact figure beside; bytes sent per rank
follow the checks' ring model (``harness.language.observed.ring_bytes``). Per-rank tables show the
first observed rank and say which ranks agree. Pure: no torch, no files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from harness.contract.fields import fields, varies
from harness.contract.names import MEMORY_CATEGORIES, MEMORY_UNIT_STATES
from harness.language.observed import ring_bytes
from harness.report.figures import count_exact, fraction, mb, mb_exact, ranks_text, shape, thousands
from model.names import LAYER_PARAM_NAMES_DOCUMENT

__all__ = ["render_markdown", "SECTIONS"]

#: The walkthrough's section (cited by name, where the spec cites it) for each regenerated table.
SECTIONS = {
    "config": "配置（精简版，便于数值追踪）",
    "params": "参数列表（单层）",
    "shards": "每个 rank 上的参数分片",
    "inputs": "每个 rank 上的激活值（输入）",
    "forward": "Forward 逐算子 Walkthrough",
    "between": "层间过渡",
    "backward": "Backward 简述",
    "summary": "单层单步通信量汇总",
}

# What each step of a layer's forward computes (model/steps.py numbers the tensors).
_STEP_WHAT = {
    1: "input_layernorm (RMSNorm over d)",
    2: "q / k / v projections, split into heads",
    3: "q_norm / k_norm (RMSNorm per head over d_h)",
    4: "RoPE on q and k",
    5: "attention (SDPA; GQA repeats k / v), heads flattened",
    6: "o_proj",
    7: "residual add",
    8: "post_attention_layernorm",
    9: "MLP (SwiGLU): gate, up, silu(gate) * up, down",
    10: "residual add: the layer's output",
}

_OP_WHAT = {
    "all_gather": "all-gather the unit's parameters",
    "reduce_scatter": "reduce-scatter the unit's gradients",
    "all_reduce": "all-reduce the gradient shards across replicas",
}

_STEP_PHASES = ("forward", "backward", "optimizer")

# Categories whose bytes may vary run to run on a real backend (declared in
# harness/contract/fields.py): a page regenerated from two runs must read the same.
_TIMING_CATEGORIES = tuple(
    f.path.rsplit(".", 1)[1] for f in fields() if f.path.startswith("memory.bytes.") and varies(f.path, "gloo")
)


@dataclass
class _Block:
    """One ``##`` section: heading, the :data:`SECTIONS` key it regenerates (or None), lines."""

    title: str
    section: str | None
    lines: list[str]


# --- small Markdown helpers ---------------------------------------------------------------


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _per_rank(obs: Mapping[str, Any], build: Callable[[Mapping[str, Any]], list[str]]) -> list[str]:
    """``build(rank_doc)`` for every observed rank; one block per distinct result, with its ranks."""
    variants: list[tuple[list[str], list[int]]] = []
    for rank_doc in obs["ranks"]:
        lines = build(rank_doc)
        for known, ranks in variants:
            if known == lines:
                ranks.append(rank_doc["rank"])
                break
        else:
            variants.append((lines, [rank_doc["rank"]]))
    out: list[str] = []
    for lines, ranks in variants:
        label = f"rank{'s' if len(ranks) > 1 else ''} {ranks_text(ranks)}"
        out += [f"On {label}{' (every observed rank)' if len(variants) == 1 else ''}:", ""] + lines + [""]
    return out


def _unit_label(name: str) -> str:
    return "the root" if name == "" else f"`{name}`"


def _per_unit(
    obs: Mapping[str, Any],
    units: Sequence[Mapping[str, Any]],
    what: Callable[[Mapping[str, Any]], str],
    section: str,
    build: Callable[[Mapping[str, Any], str], list[str]],
) -> list[_Block]:
    """One block per group of units whose per-rank tables read the same (``build(rank_doc, unit name)``),
    titled "``what(first unit)`` (each of `layers.0`, `layers.1`)"."""
    groups: list[tuple[list[str], list[Mapping[str, Any]]]] = []
    for unit in units:
        lines = _per_rank(obs, lambda rank_doc, name=unit["name"]: build(rank_doc, name))
        for known, members in groups:
            if known == lines and members[0]["role"] == unit["role"]:
                members.append(unit)
                break
        else:
            groups.append((lines, [unit]))
    blocks = []
    for lines, members in groups:
        names = ", ".join(_unit_label(u["name"]) for u in members)
        blocks.append(_Block(f"{what(members[0])} ({'each of ' if len(members) > 1 else ''}{names})", section, lines))
    return blocks


# --- reading the observation --------------------------------------------------------------


def _layer_units(obs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [u for u in obs["fsdp_units"] if u["role"] == "layer"]


def _param_units(obs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Units that manage parameters, in ``fully_shard`` order."""
    return [u for u in obs["fsdp_units"] if u["params"]]


def _rel(fqn: str, unit: str) -> str:
    return fqn[len(unit) + 1 :] if unit and fqn.startswith(unit + ".") else fqn


def _unit_params(rank_doc: Mapping[str, Any], unit: str) -> list[Mapping[str, Any]]:
    params = [p for p in rank_doc["params"] if p["unit"] == unit]
    # the document's order (forward order of use); names not listed keep their observed order after these
    order = {name: i for i, name in enumerate(LAYER_PARAM_NAMES_DOCUMENT)}
    return sorted(params, key=lambda p: order.get(_rel(p["fqn"], unit), len(order)))


def _step_collectives(rank_doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in rank_doc["collectives"] if c.get("phase") in _STEP_PHASES]


def _hook(c: Mapping[str, Any]) -> str | None:
    """The FSDP hook that issued ``c``: its ``hook``, else the innermost non-data-movement ``fsdp_labels``."""
    if "hook" in c:
        return c["hook"]
    for label in reversed(c.get("fsdp_labels") or []):
        name = label.removeprefix("FSDP::").split(" (")[0].split(" for")[0]
        if name not in ("all_gather", "all_gather_copy_out"):
            return name
    return None


def _sent_formula(c: Mapping[str, Any]) -> str:
    """ "3/4 × 4.72 MB" for one collective of buffer S on N ranks (ring model)."""
    n, s = c["group_size"], c["buffer_bytes"]
    if c["op"] in ("all_gather", "reduce_scatter"):
        return f"{fraction(n - 1, n)} × {mb(s)}"
    if c["op"] == "all_reduce":
        return f"2 × {fraction(n - 1, n)} × {mb(s)}"
    return mb(s)


def _share(part: int, whole: int) -> str:
    """ "1/4" when the fraction is a simple one (denominator up to 64), else "33.4%"."""
    from fractions import Fraction

    f = Fraction(part, whole)
    return fraction(part, whole) if f.denominator <= 64 else f"{100 * part / whole:.1f}%"


def _comm(colls: Sequence[Mapping[str, Any]]) -> str:
    """Collectives as one cell: op ×count on the group, elements in → out, what each rank sends."""
    if not colls:
        return "none"
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for c in colls:
        key = (
            c["op"],
            c.get("mesh_dim"),
            c["group_size"],
            c["dtype"],
            c["numel_in"],
            c["numel_out"],
            c["buffer_bytes"],
        )
        groups.setdefault(key, []).append(c)
    parts = []
    for (op, mesh_dim, n, dtype, numel_in, numel_out, _), cs in groups.items():
        times = f" ×{len(cs)}" if len(cs) > 1 else ""
        on = f"{mesh_dim} ({n} ranks)" if mesh_dim else f"{n} ranks"
        each = " each" if len(cs) > 1 else ""
        parts.append(
            f"{op}{times} on {on}, {dtype}, {thousands(numel_in)} → {thousands(numel_out)} elements; "
            f"sends {_sent_formula(cs[0])} ≈ {mb_exact(ring_bytes(cs[0]))} per rank{each}"
        )
    return "; ".join(parts)


def _config(obs: Mapping[str, Any]) -> Any | None:
    try:
        from model.config import get_config

        model = obs["setup"]["model"]
        return get_config(model["config"], **dict(model.get("overrides") or {}))
    except Exception:  # an unknown config renders without its table rather than failing
        return None


def _param_state(rank_doc: Mapping[str, Any], unit: str, point: str) -> Mapping[str, Any] | None:
    for s in rank_doc["param_states"]:
        if s["unit"] == unit and s["point"] == point:
            return s
    return None


# --- the sections -------------------------------------------------------------------------


def _intro(spec: Any, obs: Mapping[str, Any]) -> list[str]:
    env, setup = obs["environment"], obs["setup"]
    mesh = f"mesh {env['mesh_shape']} ({', '.join(env['mesh_dim_names'])})"
    how = "simulated with the fake process group" if env["simulated"] else f"({env['backend']} on {env['device_type']})"
    lines = [
        f"# {getattr(spec, 'title', '') or getattr(spec, 'name', 'spec')}",
        "",
        f"The tables of *{getattr(spec, 'document', '') or 'the document'}*, regenerated from one FSDP2 training step "
        f"of spec `{getattr(spec, 'name', '')}`: torch {env['torch_version']}, {env['world_size']} ranks {how}, "
        f"{mesh}, parameters in {setup['model']['dtype']}, observed ranks {ranks_text(env['observed_ranks'])}.",
        "",
        "Rounded figures are printed as the document prints them (three significant digits; MB = 10^6 bytes), "
        "the exact figure beside in parentheses. Bytes a collective sends per rank follow the ring model: "
        "(N−1)/N of the full buffer for an all-gather or a reduce-scatter.",
    ]
    return lines


def _section_config(obs: Mapping[str, Any]) -> list[_Block]:
    config = _config(obs)
    if config is None:
        return []
    env, setup = obs["environment"], obs["setup"]
    h_q, h_kv = config.num_attention_heads, config.num_key_value_heads
    gqa = f" (GQA {h_q // h_kv}:1)" if h_kv and h_q % h_kv == 0 and h_q != h_kv else ""
    mesh = env["mesh_shape"]
    world = f"{env['world_size']}" + (
        f" (mesh {shape(mesh)}: {' × '.join(env['mesh_dim_names'])})" if len(mesh) > 1 else ""
    )
    rows = [
        ("hidden_size", "d", config.hidden_size),
        ("num_attention_heads", "h_q", h_q),
        ("num_key_value_heads", "h_kv", f"{h_kv}{gqa}"),
        ("head_dim", "d_h", config.head_dim),
        ("intermediate_size", "d_ffn", config.intermediate_size),
        ("num_hidden_layers", "N_L", config.num_hidden_layers),
        ("DP world size", "N", world),
        ("batch per rank", "B", setup["batch_per_rank"]),
        ("sequence length", "L", setup["seq_len"]),
        ("parameter dtype", "", setup["model"]["dtype"]),
    ]
    return [_Block("Configuration", "config", _table(("setting", "symbol", "value"), rows))]


def _unit_kind(unit: Mapping[str, Any]) -> str:
    return "one layer" if unit["role"] == "layer" else "a unit"


def _section_params(obs: Mapping[str, Any]) -> list[_Block]:
    def build(rank_doc: Mapping[str, Any], unit: str) -> list[str]:
        params = _unit_params(rank_doc, unit)
        rows = [(_rel(p["fqn"], unit), shape(p["full_shape"]), thousands(p["numel"])) for p in params]
        numel = sum(p["numel"] for p in params)
        nbytes = sum(p["numel"] * p["element_size"] for p in params)
        total = "layer" if unit in layers else "unit"
        rows.append((f"**{total} total ({len(params)} parameters)**", "", count_exact(numel)))
        dtypes = sorted({p["dtype"] for p in params})
        return _table(("name", "shape", "elements"), rows) + [
            "",
            f"In {', '.join(dtypes)} the {total}'s parameters take {mb_exact(nbytes)}.",
        ]

    layers = {u["name"] for u in _layer_units(obs)}
    # full shapes are the same on every rank: the first rank's table stands for all
    first = {**obs, "ranks": obs["ranks"][:1]}
    blocks = _per_unit(first, _param_units(obs), lambda u: f"Parameters of {_unit_kind(u)}", "params", build)
    for block in blocks:  # "On rank 0 (every observed rank):" would claim more than was looked at
        block.lines = block.lines[2:]
    return blocks


def _section_shards(obs: Mapping[str, Any]) -> list[_Block]:
    def build(rank_doc: Mapping[str, Any], unit: str) -> list[str]:
        params = _unit_params(rank_doc, unit)
        placements = sorted({" ".join(p["placements"]) or "(plain tensor)" for p in params})
        mesh_dims = sorted({", ".join(p["mesh_dim_names"]) for p in params if p["mesh_dim_names"]})
        rows = [
            (_rel(p["fqn"], unit), shape(p["full_shape"]), shape(p["local_shape"]), thousands(p["local_numel"]))
            for p in params
        ]
        local = sum(p["local_numel"] for p in params)
        local_bytes = sum(p["local_numel"] * p["element_size"] for p in params)
        full_bytes = sum(p["numel"] * p["element_size"] for p in params)
        rows.append(("**total per rank**", "", "", count_exact(local)))
        what = "layer" if unit in layers else "unit"
        share = f"{_share(local_bytes, full_bytes)} of the {what}'s {mb(full_bytes)}" if full_bytes else "no bytes"
        return (
            [
                f"Every parameter is a DTensor with placements {', '.join(placements)} on mesh dim "
                f"{', '.join(mesh_dims) or '-'}.",
                "",
            ]
            + _table(("name", "full shape", "shard on this rank", "elements on this rank"), rows)
            + [
                "",
                f"This rank's shards of the {what} take {mb_exact(local_bytes)}: {share}.",
            ]
        )

    layers = {u["name"] for u in _layer_units(obs)}
    return _per_unit(obs, _param_units(obs), lambda u: "Shards on each rank", "shards", build)


def _section_inputs(obs: Mapping[str, Any]) -> list[_Block]:
    ranks = obs["ranks"]
    name = ranks[0]["input"]["name"]
    rows = [(r["rank"], shape(r["input"]["shape"]), ", ".join(str(s) for s in r["input"]["samples"])) for r in ranks]
    setup, env = obs["setup"], obs["environment"]
    lines = [
        f"Global batch {env['world_size'] * setup['batch_per_rank']} = {env['world_size']} ranks × "
        f"{setup['batch_per_rank']} samples; the samples column is observed (the rank's input rows matched "
        f"against the global batch).",
        "",
    ]
    lines += _table(("rank", f"{name} held", "samples of the global batch"), rows)
    return [_Block("Inputs on each rank", "inputs", lines)]


def _state_text(state: Mapping[str, Any] | None, placements: str) -> str:
    if state is None:
        return "not observed"
    params = state["params"]
    plain = sum(not p["is_dtensor"] for p in params)
    if plain == len(params):
        kind = "full plain tensors"
    elif plain == 0:
        kind = f"DTensor shards ({placements})"
    else:
        kind = f"{plain} plain tensors, {len(params) - plain} DTensor shards"
    return f"{len(params)} parameters: {kind}, {mb_exact(state['bytes'])}"


def _section_forward(obs: Mapping[str, Any]) -> list[_Block]:
    from model.steps import STEPS_BY_NAME

    index_of = {u["name"]: u["layer"] for u in _layer_units(obs)}

    def build(rank_doc: Mapping[str, Any], unit: str) -> list[str]:
        index = index_of[unit]
        colls = [c for c in _step_collectives(rank_doc) if c["phase"] == "forward" and c.get("unit") == unit]
        pre = [c for c in colls if _hook(c) == "pre_forward"]
        post = [c for c in colls if _hook(c) == "post_forward"]
        inside = [c for c in colls if c not in pre and c not in post]
        placements = ", ".join(sorted({" ".join(p["placements"]) for p in _unit_params(rank_doc, unit)}))
        before = _param_state(rank_doc, unit, "pre_forward")
        after = _param_state(rank_doc, unit, "post_forward")
        by_step: dict[int, list[str]] = {}
        for s in rank_doc["steps"]:
            if s["layer"] != index or s["name"] not in STEPS_BY_NAME:
                continue
            tensor = s["name"].split(".", 1)[1]
            by_step.setdefault(STEPS_BY_NAME[s["name"]].step, []).append(f"{tensor} {shape(s['shape'])}")
        inp = rank_doc["input"]
        # The first layer's input is the step's input only for a bare stack of layers.
        held = (
            f"; input {inp['name']} {shape(inp['shape'])}" if obs["setup"]["model"]["body"] == "decoder_layers" else ""
        )
        rows = [(0, "pre-forward hook: all-gather the layer", f"{_state_text(before, placements)}{held}", _comm(pre))]
        inside_text = "none" if not inside else "see the row below"
        for step in range(1, 11):
            rows.append((step, _STEP_WHAT[step], ", ".join(by_step.get(step, [])) or "not observed", inside_text))
        if inside:
            rows.append(("1–10", "inside the layer's forward (not attributed to one step)", "", _comm(inside)))
        rows.append((11, "post-forward hook: reshard", _state_text(after, placements), _comm(post)))
        out = _table(("step", "what", "tensors on this rank", "communication"), rows)
        if before is not None and after is not None:
            out += [
                "",
                f"Parameter memory of the layer on this rank: {mb_exact(before['bytes'])} after Step 0, "
                f"{mb_exact(after['bytes'])} after Step 11.",
            ]
        return out

    return _per_unit(obs, _layer_units(obs), lambda u: "Forward, step by step", "forward", build)


def _section_between(obs: Mapping[str, Any]) -> list[_Block]:
    layer_names = {u["name"] for u in _layer_units(obs)}

    def build(rank_doc: Mapping[str, Any]) -> list[str]:
        outside = [
            c for c in _step_collectives(rank_doc) if c["phase"] == "forward" and c.get("unit") not in layer_names
        ]
        return [f"Forward collectives outside every layer unit's hooks: {_comm(outside)}."]

    if not layer_names:
        return []
    return [_Block("Between layers", "between", _per_rank(obs, build))]


def _section_backward(obs: Mapping[str, Any]) -> list[_Block]:
    def build(rank_doc: Mapping[str, Any], unit: str) -> list[str]:
        colls = _step_collectives(rank_doc)
        bwd = [c for c in colls if c["phase"] == "backward" and c.get("unit") == unit]
        gather = [c for c in bwd if _hook(c) in ("pre_backward", "backward_prefetch")]
        reduce = [c for c in bwd if (_hook(c) or "").startswith("post_backward")]
        other = [c for c in bwd if c not in gather and c not in reduce]
        opt = [c for c in colls if c["phase"] == "optimizer"]
        prefetched = [c for c in gather if _hook(c) == "backward_prefetch"]
        by = ""
        if prefetched:
            issuers = sorted(
                {
                    lbl.split("(", 1)[1].rstrip(")")
                    for c in prefetched
                    for lbl in c.get("fsdp_labels", [])
                    if lbl.startswith("FSDP::pre_backward (")
                }
            )
            by = f" (issued early by backward prefetch, in the pre-backward of {', '.join(f'`{u}`' for u in issuers)})"
        rows = [
            ("0", "pre-backward hook: all-gather the layer" + by, _comm(gather)),
            ("1–10", "backward of each step, in reverse (local compute)", _comm(other)),
            ("11", "post-backward hook: reduce-scatter the gradients, reshard the parameters", _comm(reduce)),
            ("optimizer", f"{obs['setup']['optimizer']['name']} step on each rank's shards", _comm(opt)),
        ]
        return _table(("step", "what", "communication"), rows)

    return _per_unit(obs, _layer_units(obs), lambda u: "Backward", "backward", build)


def _dtypes(values: Iterable[str | None]) -> str:
    found = sorted({v for v in values if v})
    return ", ".join(found) if found else "none observed"


def _section_precision(obs: Mapping[str, Any]) -> list[_Block]:
    """Each unit's MixedPrecisionPolicy (as torch's FSDP state holds it) beside the first rank's observed
    dtypes: all-gathers, reduce-scatters, forward output."""
    units = _param_units(obs)
    if not units:
        return []
    rank_doc = obs["ranks"][0]
    storage = obs["setup"]["model"]["dtype"]

    def policy(unit: Mapping[str, Any], key: str) -> str:
        state = unit.get("state")
        if not state or key not in state:
            return "not recorded"
        return state[key] or f"none (keeps {storage})" if key == "param_dtype" else state[key] or "none"

    rows = []
    for unit in units:
        colls = [c for c in _step_collectives(rank_doc) if c.get("unit") == unit["name"]]
        after = _param_state(rank_doc, unit["name"], "post_forward")
        rows.append(
            (
                _unit_label(unit["name"]),
                policy(unit, "param_dtype"),
                policy(unit, "reduce_dtype"),
                policy(unit, "output_dtype"),
                _dtypes(c["dtype"] for c in colls if c["op"] == "all_gather"),
                _dtypes(c["dtype"] for c in colls if c["op"] == "reduce_scatter"),
                _dtypes((after or {}).get("output_dtypes") or ()),
            )
        )
    header = (
        "unit",
        "param_dtype",
        "reduce_dtype",
        "output_dtype",
        "all-gather (observed)",
        "reduce-scatter (observed)",
        "forward output (observed)",
    )
    lines = [
        f"Parameters are stored in {storage}. The policy is each unit's MixedPrecisionPolicy as FSDP holds it "
        f"(none: that dtype is not changed); the observed dtypes are rank {rank_doc['rank']}'s.",
        "",
    ] + _table(header, rows)
    return [_Block("Mixed precision", None, lines)]


def _memory_order(obs: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], tuple]:
    """Snapshots in step order: the root's 'After fully_shard', each unit's in forward order, the root's after."""
    units = {u["name"]: i for i, u in enumerate(obs["fsdp_units"])}
    root_only = ("After fully_shard",)

    def key(m: Mapping[str, Any]) -> tuple:
        state = m["state"]
        if state in root_only:
            return (0, 0, 0)
        if state in MEMORY_UNIT_STATES:
            return (1, units.get(m["module"], len(units)), MEMORY_UNIT_STATES.index(state))
        return (2, 0, 0)

    return key


def _section_memory(obs: Mapping[str, Any]) -> list[_Block]:
    """FSDPMemTracker's snapshots of the first step and microbatch per rank, bytes by category (all-zero
    ones left out; temp, total and peaks too on a real backend, where they depend on thread timing)."""
    if not any(r.get("memory") for r in obs["ranks"]):
        return []
    labels = {name: label for label, name in MEMORY_CATEGORIES.items()}
    order = _memory_order(obs)

    simulated = obs["environment"]["simulated"]

    def listed(m: Mapping[str, Any]) -> bool:
        # A peak is snapshotted when the total is highest, and on a real backend the total holds
        # timing-dependent temp bytes: which moment that is may differ from run to run.
        peak = m["state"].startswith("Peak")
        return m.get("step_index") in (None, 0) and m.get("microbatch") in (None, 0) and (simulated or not peak)

    def build(rank_doc: Mapping[str, Any]) -> list[str]:
        snaps = sorted((m for m in rank_doc.get("memory", []) if listed(m)), key=order)
        if not snaps:
            return ["No snapshot recorded."]
        sizes = [m.get("unrounded_bytes", m["bytes"]) for m in snaps]
        shown = [c for c in labels if c not in _TIMING_CATEGORIES and any(b.get(c) for b in sizes)]
        rows = [
            (_unit_label(m["module"]), m["state"], *(mb(b.get(c, 0)) if b.get(c) else "0" for c in shown))
            for m, b in zip(snaps, sizes)
        ]
        return _table(("unit", "state", *(labels[c] for c in shown)), rows)

    lines = [
        "Each rank's bytes by FSDPMemTracker category at every snapshot of the first step, storages at "
        "their real sizes (MB = 10^6 bytes; a snapshot counts the whole rank). Temp and Total are left out: "
        "on a real backend they depend on thread timing"
        + ("." if obs["environment"]["simulated"] else ", and so does when a peak is snapshotted: peaks too."),
        "",
    ]
    return [_Block("Memory", None, lines + _per_rank(obs, build))]


def _unit_sent(rank_doc: Mapping[str, Any], unit: str) -> int:
    return sum(ring_bytes(c) for c in _step_collectives(rank_doc) if c.get("unit") == unit)


def _section_summary(obs: Mapping[str, Any]) -> list[_Block]:
    layers = _layer_units(obs)
    units = [u for u in obs["fsdp_units"] if any(_unit_sent(r, u["name"]) for r in obs["ranks"])]
    if not units:
        return []

    def build(rank_doc: Mapping[str, Any], unit: str) -> list[str]:
        mine = [c for c in _step_collectives(rank_doc) if c.get("unit") == unit]
        groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for c in mine:
            groups.setdefault((c["phase"], c["op"]), []).append(c)
        rows = []
        for (phase, op), cs in groups.items():
            total = sum(ring_bytes(c) for c in cs)
            formula = _sent_formula(cs[0])
            times = f"{len(cs)} × " if len(cs) > 1 else ""
            rows.append((phase, _OP_WHAT.get(op, op), f"{times}{formula} ≈ {mb_exact(total)}"))
        what = "one layer" if unit in layer_names else "this unit"
        rows.append((f"**{what}, one step**", "", mb_exact(_unit_sent(rank_doc, unit))))
        dtypes = ", ".join(sorted({c["dtype"] for c in mine})) or "-"
        return _table(("phase", "operation", f"sent per rank ({dtypes})"), rows)

    def totals(rank_doc: Mapping[str, Any]) -> list[str]:
        rows = [(_unit_label(u["name"]), mb_exact(_unit_sent(rank_doc, u["name"]))) for u in units]
        step_total = sum(ring_bytes(c) for c in _step_collectives(rank_doc))
        out = _table(("unit", "sent per rank, one step"), rows) + [""]
        if layers:
            sent = [_unit_sent(rank_doc, u["name"]) for u in layers]
            n = len(sent)
            # each layer's own bytes: layers that differ (one kept unsharded after forward) add as they are
            added = f"{n} × {mb(sent[0])}" if len(set(sent)) == 1 else " + ".join(mb(b) for b in sent)
            out.append(f"For N_L = {n} layers: {added} ≈ {mb_exact(sum(sent))} per rank.")
        out.append(f"All collectives of the step on this rank send {mb_exact(step_total)}.")
        return out

    layer_names = {u["name"] for u in layers}
    blocks = _per_unit(obs, units, lambda u: f"Communication of {_unit_kind(u)} per step", "summary", build)
    return blocks + [_Block("Communication of the step", "summary", _per_rank(obs, totals))]


def render_markdown(spec: Any, observation: Mapping[str, Any]) -> str:
    """The document's tables for ``observation`` (validated, ``fsdp2-observation/1``), as Markdown: one
    ``##`` section per table, per unit or group of units observed the same. ``spec``'s ``name``,
    ``title`` and ``document`` head the page; the sections its tables cite name the headings.
    Units: elements, bytes; MB = 10^6 bytes."""
    raw = getattr(spec, "raw", None) or {}
    tables = raw.get("tables") if isinstance(raw, Mapping) else None
    cited = {t.get("section") for t in tables or () if isinstance(t, Mapping)}
    lines = _intro(spec, observation)
    for section in (
        _section_config,
        _section_params,
        _section_shards,
        _section_inputs,
        _section_forward,
        _section_between,
        _section_backward,
        _section_precision,
        _section_memory,
        _section_summary,
    ):
        for block in section(observation):
            lines += ["", f"## {block.title}", ""]
            document = SECTIONS.get(block.section or "")
            if document in cited:
                lines += [f"Document section: {document}", ""]
            lines += block.lines
    out: list[str] = []
    for line in lines:  # no runs of blank lines, none at the end
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"
