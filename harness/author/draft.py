"""Draft a spec for a model config and world size from the closed-form calculator.

``python -m harness draft --config Qwen3-14B --world-size 128`` writes the walkthrough's tables
(parameter list, shard per rank, step shapes, collectives and bytes, per-layer per-step
totals, reshard state) for that config, each figure computed by :mod:`harness.author.calculator`,
never by running anything. Every entry is marked ``drafted: true``: the author reviews it
against their own document before relying on it. The drafted spec passes when run, because the
calculator and FSDP2 agree; where they do not, the failing entry is the finding.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any, Mapping

import yaml

from harness.author import calculator as calc
from model.steps import STEPS, resolve_shape

# Above this many ranks the draft uses the fake backend (one process, simulated ranks).
REAL_RANKS_LIMIT = 8


def _config(name_or_file: str) -> tuple[Any, Any]:
    """(config value for the spec's setup, Qwen3Config)."""
    from model import KNOWN_CONFIGS, get_config

    if name_or_file in KNOWN_CONFIGS:
        return name_or_file, KNOWN_CONFIGS[name_or_file]
    path = Path(name_or_file)
    if not path.exists():
        raise SystemExit(f"--config: {name_or_file!r} is neither a known config ({', '.join(KNOWN_CONFIGS)}) nor a file")
    fields = yaml.safe_load(path.read_text())
    if not isinstance(fields, Mapping):
        raise SystemExit(f"{path}: expected a mapping of Qwen3Config fields")
    try:
        return dict(fields), get_config(fields)
    except ValueError as exc:
        raise SystemExit(f"{path}: {exc}") from None


def _flow(value: Any) -> str:
    """One-line YAML for a value. Not JSON: YAML 1.1 (PyYAML) reads JSON's 1e-06 as a string."""
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10**9, sort_keys=False)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_")


def draft_spec(config: str, world_size: int, *, layers: int = 2, param_dtype: str = "bfloat16",
               batch_per_rank: int = 1, seq_len: int = 16, backend: str = "auto") -> str:
    """Return the YAML text of a drafted spec.

    Args:
        config: a name in ``model.KNOWN_CONFIGS`` or a YAML/JSON file of Qwen3Config fields.
        world_size: N, the 1-D ``dp`` mesh size.
        layers: decoder layers to run (N_L).
        param_dtype: parameter dtype; bytes follow from it.
        batch_per_rank, seq_len: B and L.
        backend: "auto" picks fake above :data:`REAL_RANKS_LIMIT` ranks, else the harness's auto.
    """
    setup_config, cfg = _config(config)
    dims = calc.to_dims(cfg)
    dims = calc.Dims(**{**dims.__dict__, "num_hidden_layers": layers})
    if backend == "auto" and world_size > REAL_RANKS_LIMIT:
        backend = "fake"
    observe = [0, world_size - 1] if backend == "fake" and world_size > 1 else list(range(world_size))
    layer = calc.layer_tables(dims, world_size, param_dtype=param_dtype)
    model = calc.model_tables(dims, world_size, param_dtype=param_dtype)
    symbols = calc.step_symbols(dims, batch_per_rank, seq_len)
    name = _slug(f"{setup_config if isinstance(setup_config, str) else 'custom'}_w{world_size}")
    d = "drafted: true"
    out: list[str] = []
    w = out.append

    w(f"# Drafted on {_dt.date.today().isoformat()} by: python -m harness draft --config {config} --world-size {world_size}")
    w("# Every figure comes from harness/author/calculator.py (closed form), not from a run. Each entry is")
    w("# marked 'drafted: true': review it against your own document, then remove the mark.")
    w(f"spec: {name}")
    label = setup_config if isinstance(setup_config, str) else Path(config).stem
    w(f"title: {_flow(f'{label}: {layers} decoder layers under FSDP2 on {world_size} ranks (drafted)')}")
    w(f"document: {_flow('drafted from harness/author/calculator.py; name the document you review it against')}")
    if backend != "auto":
        w(f"backend: {backend}")
    w("setup:")
    w(f"  model: {_flow({'config': setup_config, 'overrides': {'num_hidden_layers': layers}, 'body': 'decoder_layers'})}")
    w(f"  param_dtype: {param_dtype}")
    w(f"  mesh: {_flow({'shape': [world_size], 'dim_names': ['dp']})}")
    w(f"  batch_per_rank: {batch_per_rank}")
    w(f"  seq_len: {seq_len}")
    w("  fsdp: {reshard_after_forward: true}")
    w("  optimizer: {name: sgd, lr: 0.01}")
    if backend == "fake":
        w(f"  observe_ranks: {_flow(observe)}")
    w("tables:")

    # Parameter list (one layer)
    w('  - section: "参数列表（单层）"')
    w("    title: parameter list")
    w("    check: param")
    w("    with: {layer: 0, ranks: %s}" % _flow(observe[:1]))
    w("    columns: [param, full_shape, numel, drafted]")
    w("    rows:")
    for p in layer.params:
        w(f"      - [{p.name}, {_flow(list(p.full_shape))}, {p.numel}, true]")
    w('  - section: "参数列表（单层）"')
    w("    title: layer totals")
    w("    check: params_total")
    w("    with: {layer: 0, ranks: %s}" % _flow(observe[:1]))
    w("    entries:")
    w(f"      - {{id: layer_numel, count: {len(layer.params)}, numel: {layer.numel}, {d}}}")
    w(f"      - {{id: layer_bytes, says: {_flow(f'{layer.full_storage_bytes / calc.MB:.2f} MB per layer in {param_dtype}')}, bytes: {layer.full_storage_bytes}, {d}}}")

    # Shard per rank
    w('  - section: "每个 rank 上的参数分片"')
    w("    title: shard per rank")
    w("    check: param")
    w("    with: {layer: 0}")
    w("    columns: [id, param, ranks, local_shape, local_numel, placements, drafted]")
    w("    rows:")
    for p in layer.params:
        by_shape: dict[tuple, list[int]] = {}
        for r in observe:
            by_shape.setdefault(p.local_shapes[r], []).append(r)
        for shape, ranks in by_shape.items():
            rid = p.name if len(by_shape) == 1 else f"{p.name}.rank{ranks[0]}"
            numel = p.local_numels[ranks[0]]
            w(f"      - [{rid}, {p.name}, {_flow(ranks)}, {_flow(list(shape))}, {numel}, [\"Shard(dim=0)\"], true]")
    w('  - section: "每个 rank 上的参数分片"')
    w("    title: shard totals")
    w("    check: params_total")
    w("    with: {layer: 0}")
    w("    entries:")
    for r in observe:
        w(f"      - {{id: rank{r}, ranks: [{r}], local_numel: {layer.local_numels[r]}, local_bytes: {layer.sharded_bytes[r]}, {d}}}")

    # Step shapes
    w('  - section: "Forward 逐算子 Walkthrough"')
    w("    title: forward step shapes")
    w("    check: step")
    w(f"    with: {{layer: all, dtype: {param_dtype}}}")
    w("    columns: [step, shape, drafted]")
    w("    rows:")
    for s in STEPS:
        w(f"      - [{s.name}, {_flow(resolve_shape(s, symbols))}, true]")

    # Collectives
    ag_f = layer.collective("all_gather", "forward")
    ag_b = layer.collective("all_gather", "backward")
    rs = layer.collective("reduce_scatter", "backward")
    w('  - section: "Step 0：Pre-Forward Hook → All-Gather 层参数"')
    w("    title: all-gather")
    w("    check: collectives")
    w("    entries:")
    w(f"      - {{id: forward_all_gather, select: {{phase: forward, layer: 0}}, count: 1, op: all_gather, dtype: {ag_f.dtype}, "
      f"numel_in: {ag_f.input_numel}, numel_out: {ag_f.output_numel}, buffer_bytes: {ag_f.size_bytes}, "
      f"ring_bytes: {_num(ag_f.ring_bytes_sent)}, group_size: {ag_f.group_size}, {d}}}")
    if layer.padding_numel:
        w(f"      # padded: the layer holds {layer.numel:,} elements; the all-gather carries {layer.padded_numel:,} "
          f"({layer.padding_numel:,} padding)")
    w('  - section: "Backward 简述"')
    w("    title: backward")
    w("    check: collectives")
    w("    entries:")
    w(f"      - {{id: backward_all_gather, select: {{phase: backward, layer: 0, op: all_gather}}, count: 1, "
      f"numel_out: {ag_b.output_numel}, ring_bytes: {_num(ag_b.ring_bytes_sent)}, {d}}}")
    w(f"      - {{id: backward_reduce_scatter, select: {{phase: backward, layer: 0, op: reduce_scatter}}, count: 1, "
      f"dtype: {rs.dtype}, numel_in: {rs.input_numel}, numel_out: {rs.output_numel}, ring_bytes: {_num(rs.ring_bytes_sent)}, {d}}}")
    w(f"      - {{id: optimizer_no_collective, select: {{phase: optimizer}}, count: 0, {d}}}")
    w('  - section: "单层单步通信量汇总"')
    w("    title: per layer per step")
    w("    check: collectives")
    w("    entries:")
    w(f"      - {{id: layer_step_total, select: {{layer: 0}}, count: {len(layer.collectives)}, "
      f"total_ring_bytes: {_num(layer.step_bytes_sent)}, {d}}}")
    w(f"      - {{id: model_step_total, says: \"N_L × per-layer total, N_L = {layers}\", select: {{}}, "
      f"total_ring_bytes: {_num(model.step_bytes_sent)}, {d}}}")

    # Reshard state
    w('  - section: "Step 11：Post-Forward Hook → Reshard"')
    w("    title: parameter state")
    w("    check: param_state")
    w("    with: {layer: 0}")
    w("    entries:")
    w(f"      - {{id: after_step0, point: pre_forward, plain_tensors: {len(layer.params)}, full_shapes: true, bytes: {layer.unsharded_bytes}, {d}}}")
    for r in observe:
        w(f"      - {{id: after_step11_rank{r}, ranks: [{r}], point: post_forward, dtensors: {len(layer.params)}, "
          f"local_shapes: true, bytes: {layer.sharded_bytes[r]}, {d}}}")
    return "\n".join(out) + "\n"


def _num(value: float | int) -> int | float:
    return int(value) if float(value).is_integer() else value
