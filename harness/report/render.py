"""The walkthrough document's tables, regenerated from a run: (spec, observation) -> Markdown.

:func:`render_markdown` lays out an observation document (``harness/schemas/
observation.schema.json``) as the tables of *FSDP2 Qwen3 Decoder Layer Walkthrough*, each
under a heading that names the document section it regenerates:

- "配置（精简版，便于数值追踪）": the configuration (d, h_q, h_kv, d_h, d_ffn, N, B, L);
- "参数列表（单层）": one layer's parameters (name, shape, elements) and the layer total;
- "每个 rank 上的参数分片": each parameter's Shard(0) shard per rank, and the per-rank total;
- "每个 rank 上的激活值（输入）": the input each rank holds and which samples of the batch;
- "Forward 逐算子 Walkthrough": Steps 0-11 of one layer: tensors and their shapes, and the
  collectives each step issues (Step 0's all-gather, Step 11's reshard);
- "层间过渡": collectives issued between layers in forward;
- "Backward 简述": the backward's Step 0 (all-gather), 1-10 and 11 (reduce-scatter);
- "单层单步通信量汇总": bytes each rank sends per layer per step, and for all N_L layers.

Figures are printed the document's way (three significant digits, "≈2.36M", "4.72 MB" with
MB = 10^6 bytes; ``harness.report.figures``) with the exact figure beside. Bytes a collective
"sends per rank" follow the ring model used by the checks (``harness.language.observed.ring_bytes``):
S x (N-1)/N for all-gather and reduce-scatter, S the full buffer. The document's layer is the
first layer unit; per-rank tables show the first observed rank and say which ranks agree
(ranks that differ get their own table).

Pure: reads only its arguments (and ``model.config`` / ``model.steps`` for the configuration's
field values and the step numbers of observed tensors); no torch, no files.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from harness.language.observed import ring_bytes
from harness.report.figures import count_exact, fraction, mb, mb_exact, ranks_text, shape, thousands
from model.names import LAYER_PARAM_NAMES_DOCUMENT

__all__ = ["render_markdown", "SECTIONS"]

#: Document section headings (cited by name) for each regenerated table.
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
    "all_gather": "all-gather the layer's parameters",
    "reduce_scatter": "reduce-scatter the layer's gradients",
    "all_reduce": "all-reduce the gradient shards across replicas",
}

_STEP_PHASES = ("forward", "backward", "optimizer")


# --- small Markdown helpers ---------------------------------------------------------------


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _heading(title: str, section_key: str) -> list[str]:
    return ["", f"## {title}", "", f"Document section: {SECTIONS[section_key]}", ""]


def _per_rank(obs: Mapping[str, Any], build: Callable[[Mapping[str, Any]], list[str]]) -> list[str]:
    """``build(rank_doc)`` for every observed rank; one block per distinct result, with the
    ranks it holds for."""
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


# --- reading the observation --------------------------------------------------------------


def _layer_units(obs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [u for u in obs["fsdp_units"] if u["role"] == "layer"]


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
    """The FSDP hook that issued ``c``: its ``hook`` field, else the innermost of its
    ``fsdp_labels`` that is not a data movement (the recorder's rule)."""
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


def _section_config(obs: Mapping[str, Any]) -> list[str]:
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
    return _heading("Configuration", "config") + _table(("setting", "symbol", "value"), rows)


def _section_params(obs: Mapping[str, Any]) -> list[str]:
    layers = _layer_units(obs)
    if not layers:
        return []
    unit = layers[0]["name"]
    rank_doc = obs["ranks"][0]
    params = _unit_params(rank_doc, unit)
    rows = [(_rel(p["fqn"], unit), shape(p["full_shape"]), thousands(p["numel"])) for p in params]
    numel = sum(p["numel"] for p in params)
    nbytes = sum(p["numel"] * p["element_size"] for p in params)
    rows.append((f"**layer total ({len(params)} parameters)**", "", count_exact(numel)))
    dtypes = sorted({p["dtype"] for p in params})
    same = [u["name"] for u in layers if len(u["params"]) == len(layers[0]["params"])]
    lines = _heading(f"Parameters of one layer (`{unit}`)", "params") + _table(("name", "shape", "elements"), rows)
    lines += ["", f"In {', '.join(dtypes)} the layer's parameters take {mb_exact(nbytes)}."]
    if len(layers) > 1:
        lines.append(
            f"Every layer unit is built the same way: {', '.join(f'`{n}`' for n in same)} hold "
            f"{len(layers[0]['params'])} parameters each."
        )
    return lines


def _section_shards(obs: Mapping[str, Any]) -> list[str]:
    layers = _layer_units(obs)
    if not layers:
        return []
    unit = layers[0]["name"]
    first = _unit_params(obs["ranks"][0], unit)
    placements = sorted({" ".join(p["placements"]) or "(plain tensor)" for p in first})
    mesh_dims = sorted({", ".join(p["mesh_dim_names"]) for p in first if p["mesh_dim_names"]})

    def build(rank_doc: Mapping[str, Any]) -> list[str]:
        params = _unit_params(rank_doc, unit)
        rows = [
            (_rel(p["fqn"], unit), shape(p["full_shape"]), shape(p["local_shape"]), thousands(p["local_numel"]))
            for p in params
        ]
        local = sum(p["local_numel"] for p in params)
        local_bytes = sum(p["local_numel"] * p["element_size"] for p in params)
        full_bytes = sum(p["numel"] * p["element_size"] for p in params)
        rows.append(("**total per rank**", "", "", count_exact(local)))
        share = f"{_share(local_bytes, full_bytes)} of the layer's {mb(full_bytes)}" if full_bytes else "no bytes"
        return _table(("name", "full shape", "shard on this rank", "elements on this rank"), rows) + [
            "",
            f"This rank's shards of the layer take {mb_exact(local_bytes)}: {share}.",
        ]

    lines = _heading(f"Shards on each rank (`{unit}`)", "shards")
    lines += [
        f"Every parameter is a DTensor with placements {', '.join(placements)} on mesh dim "
        f"{', '.join(mesh_dims) or '-'}.",
        "",
    ]
    return lines + _per_rank(obs, build)


def _section_inputs(obs: Mapping[str, Any]) -> list[str]:
    ranks = obs["ranks"]
    name = ranks[0]["input"]["name"]
    rows = [(r["rank"], shape(r["input"]["shape"]), ", ".join(str(s) for s in r["input"]["samples"])) for r in ranks]
    setup, env = obs["setup"], obs["environment"]
    lines = _heading("Inputs on each rank", "inputs")
    lines += [
        f"Global batch {env['world_size'] * setup['batch_per_rank']} = {env['world_size']} ranks × "
        f"{setup['batch_per_rank']} samples; the samples column is observed (the rank's input rows matched "
        f"against the global batch).",
        "",
    ]
    lines += _table(("rank", f"{name} held", "samples of the global batch"), rows)
    return lines


def _param_state(rank_doc: Mapping[str, Any], unit: str, point: str) -> Mapping[str, Any] | None:
    for s in rank_doc["param_states"]:
        if s["unit"] == unit and s["point"] == point:
            return s
    return None


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


def _section_forward(obs: Mapping[str, Any]) -> list[str]:
    from model.steps import STEPS_BY_NAME

    layers = _layer_units(obs)
    if not layers:
        return []
    unit, index = layers[0]["name"], layers[0]["layer"]

    def build(rank_doc: Mapping[str, Any]) -> list[str]:
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

    lines = _heading(f"Forward, step by step (`{unit}`)", "forward")
    return lines + _per_rank(obs, build)


def _section_between(obs: Mapping[str, Any]) -> list[str]:
    layer_names = {u["name"] for u in _layer_units(obs)}

    def build(rank_doc: Mapping[str, Any]) -> list[str]:
        outside = [
            c for c in _step_collectives(rank_doc) if c["phase"] == "forward" and c.get("unit") not in layer_names
        ]
        return [f"Forward collectives outside every layer unit's hooks: {_comm(outside)}."]

    if not layer_names:
        return []
    return _heading("Between layers", "between") + _per_rank(obs, build)


def _section_backward(obs: Mapping[str, Any]) -> list[str]:
    layers = _layer_units(obs)
    if not layers:
        return []
    unit = layers[0]["name"]

    def build(rank_doc: Mapping[str, Any]) -> list[str]:
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

    return _heading(f"Backward (`{unit}`)", "backward") + _per_rank(obs, build)


def _section_summary(obs: Mapping[str, Any]) -> list[str]:
    layers = _layer_units(obs)
    if not layers:
        return []
    unit = layers[0]["name"]
    n_layers = len(layers)

    def build(rank_doc: Mapping[str, Any]) -> list[str]:
        colls = _step_collectives(rank_doc)
        mine = [c for c in colls if c.get("unit") == unit]
        groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for c in mine:
            groups.setdefault((c["phase"], c["op"]), []).append(c)
        rows = []
        for (phase, op), cs in groups.items():
            total = sum(ring_bytes(c) for c in cs)
            formula = _sent_formula(cs[0])
            times = f"{len(cs)} × " if len(cs) > 1 else ""
            rows.append((phase, _OP_WHAT.get(op, op), f"{times}{formula} ≈ {mb_exact(total)}"))
        layer_total = sum(ring_bytes(c) for c in mine)
        dtypes = ", ".join(sorted({c["dtype"] for c in mine})) or "-"
        rows.append(("**one layer, one step**", "", f"{mb_exact(layer_total)}"))
        step_total = sum(ring_bytes(c) for c in colls)
        out = _table(("phase", "operation", f"sent per rank ({dtypes})"), rows)
        out += [
            "",
            f"For N_L = {n_layers} layers: {n_layers} × {mb(layer_total)} ≈ {mb_exact(n_layers * layer_total)} "
            f"per rank; all collectives of the step on this rank send {mb_exact(step_total)}.",
        ]
        return out

    return _heading(f"Communication per layer per step (`{unit}`)", "summary") + _per_rank(obs, build)


def render_markdown(spec: Any, observation: Mapping[str, Any]) -> str:
    """The document's tables for ``observation``, as Markdown.

    Args:
        spec: the loaded spec (``harness.load.spec.Spec``): its ``name``, ``title`` and
            ``document`` head the page.
        observation: a validated observation document (format ``fsdp2-observation/1``).

    Returns:
        Markdown text: one ``##`` section per regenerated table, each naming its document
        section. Units: elements, bytes; MB = 10^6 bytes.
    """
    lines = _intro(spec, observation)
    for section in (
        _section_config,
        _section_params,
        _section_shards,
        _section_inputs,
        _section_forward,
        _section_between,
        _section_backward,
        _section_summary,
    ):
        lines += section(observation)
    out: list[str] = []
    for line in lines:  # no runs of blank lines, none at the end
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"
