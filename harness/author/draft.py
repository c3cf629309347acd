"""Draft a spec for a model config and world size from the closed-form calculator.

``python -m harness draft --config Qwen3-14B --world-size 128`` writes the walkthrough's tables
(parameter list, shard per rank, step shapes, collectives and bytes, per-layer per-step
totals, reshard state) for that config, each figure computed by :mod:`harness.contract.calculator`,
never by running anything. ``--config`` is a name in ``model.KNOWN_CONFIGS``, its hub id
(``Qwen/Qwen3-8B``) or a transformers ``config.json`` (``model.config.read_config_file``);
a file is referenced from the drafted spec's ``setup.model.config``, and its ``torch_dtype``
is the parameter dtype unless ``--dtype`` says otherwise.

The spec is built as data, its rows as the calculator hands them out (already in the spec's
field names), and written with ``yaml.safe_dump`` under a comment header. Every entry is marked
``drafted: true``: the author reviews it against their own document before relying on it. The
drafted spec passes when run, because the calculator and FSDP2 agree; where they do not, the
failing entry is the finding.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any

import yaml

from harness.contract import calculator as calc
from model.config import KNOWN_CONFIGS, ConfigFile, Qwen3Config, known_config_name, read_config_file
from model.steps import ALL_STEPS_BY_NAME, MOE_LAYER_STEP_NAMES, STEPS, resolve_shape

REAL_RANKS_LIMIT = 8
"""Above this many ranks the draft uses the fake backend (one process, simulated ranks)."""

DEFAULT_DTYPE = "bfloat16"
"""The parameter dtype when neither ``--dtype`` nor the config file gives one (the released
Qwen3 checkpoints' ``torch_dtype``)."""

DTYPES = tuple(calc.DTYPE_BYTES)

_DRAFTED = {"drafted": True}


class DraftError(ValueError):
    """A config or option the draft cannot use; ``str()`` is one line naming it."""


def _read_config(config: str) -> tuple[str | None, Qwen3Config, ConfigFile | None]:
    """(the known name or None, the Qwen3Config or Qwen3MoeConfig, the file read or None)."""
    name = known_config_name(config)
    if name is not None:
        return name, KNOWN_CONFIGS[name], None
    if not Path(config).exists():
        raise DraftError(
            f"--config: {config!r} is neither a known config ({', '.join(KNOWN_CONFIGS)}, "
            f"or their hub ids Qwen/<name>) nor a file"
        )
    try:
        read = read_config_file(config)
    except ValueError as exc:
        raise DraftError(f"--config {exc}") from None
    return None, read.config, read


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_")


def _config_reference(path: str, output: str | Path | None) -> str:
    """How the drafted spec names the config file: relative to the spec's folder when the spec
    is written to a file (the loader resolves it from there), else absolute."""
    if output is None:
        return str(Path(path).resolve())
    return Path(os.path.relpath(Path(path).resolve(), Path(output).resolve().parent)).as_posix()


def draft(
    config: str,
    world_size: int,
    *,
    layers: int = 2,
    dtype: str | None = None,
    batch_per_rank: int = 1,
    seq_len: int = 16,
    backend: str = "auto",
    output: str | Path | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """The drafted spec as (comment header lines, spec mapping).

    Args:
        config: a name in ``model.KNOWN_CONFIGS``, its hub id, or a transformers
            ``config.json`` (or a YAML/JSON mapping of ``Qwen3Config`` fields); a MoE one
            (``Qwen3-30B-A3B``, a ``model_type: qwen3_moe`` file) drafts its sparse layers'
            fused experts and router, and their Step 9.
        world_size: N, the 1-D ``dp`` mesh size.
        layers: decoder layers to run (N_L).
        dtype: parameter dtype (bytes follow from it); None: the config file's
            ``torch_dtype`` / ``dtype``, else :data:`DEFAULT_DTYPE`.
        batch_per_rank, seq_len: B and L.
        backend: "auto" picks fake above :data:`REAL_RANKS_LIMIT` ranks, else the harness's auto.
        output: where the spec will be written: a config file is referenced relative to it.

    Raises:
        DraftError: an unknown config, an unreadable or refused config file, a dtype the
            harness does not run.
    """
    name, cfg, read = _read_config(config)
    dtype_source = "--dtype"
    if dtype is None:
        if read is not None and read.dtype is not None:
            dtype, dtype_source = read.dtype, f"the config file's {read.dtype_field}"
        else:
            dtype, dtype_source = DEFAULT_DTYPE, "the draft's default (the released Qwen3 checkpoints' torch_dtype)"
    if dtype not in DTYPES:
        raise DraftError(
            f"dtype {dtype!r} (from {dtype_source}) is not one the harness runs ({', '.join(DTYPES)}); pass --dtype"
        )

    dims = calc.Dims(**{**calc.to_dims(cfg).__dict__, "num_hidden_layers": layers})
    if backend == "auto" and world_size > REAL_RANKS_LIMIT:
        backend = "fake"
    observe = [0, world_size - 1] if backend == "fake" and world_size > 1 else list(range(world_size))
    layer = calc.layer_tables(dims, world_size, storage_dtype=dtype)
    model = calc.model_tables(dims, world_size, storage_dtype=dtype)
    symbols = calc.step_symbols(dims, batch_per_rank, seq_len)

    if read is None:
        label, setup_config = name, name
    else:  # a checkpoint folder's config.json is named after the folder
        file = Path(read.path)
        label = file.resolve().parent.name if file.name == "config.json" else file.stem
        setup_config = _config_reference(read.path, output)

    header = [
        f"Drafted on {_dt.date.today().isoformat()} by: python -m harness draft --config {config} "
        f"--world-size {world_size}" + (f" --dtype {dtype}" if dtype_source == "--dtype" else ""),
        "Every figure comes from harness/contract/calculator.py (closed form), not from a run. Each entry is",
        "marked 'drafted: true': review it against your own document, then remove the mark.",
    ]
    description = f"{label}: {layers} of its decoder layers as FSDP2 units on {world_size} ranks, drafted."
    if read is not None:
        header.append(
            f"Model config: {read.path} (transformers config.json); accepted and ignored: "
            f"{', '.join(read.ignored) or 'nothing'}."
        )
    if dtype_source != "--dtype":
        header.append(f"model dtype {dtype}: {dtype_source}.")
        description += f" The model dtype {dtype} is {dtype_source}."

    setup: dict[str, Any] = {
        "model": {
            "config": setup_config,
            "overrides": {"num_hidden_layers": layers},
            "body": "decoder_layers",
            "dtype": dtype,
        },
        "mesh": {"shape": [world_size], "dim_names": list(layer.mesh_dim_names)},
        "batch_per_rank": batch_per_rank,
        "seq_len": seq_len,
        "fsdp": {"reshard_after_forward": True},
        "optimizer": {"name": "sgd", "lr": 0.01},
    }
    if backend == "fake":
        setup["observe_ranks"] = observe

    spec: dict[str, Any] = {
        "spec": _slug(f"{label}_w{world_size}"),
        "title": f"{label}: {layers} decoder layers under FSDP2 on {world_size} ranks (drafted)",
        "document": "drafted from harness/contract/calculator.py; name the document you review it against",
        "description": description,
    }
    if backend != "auto":
        spec["backend"] = backend
    spec["setup"] = setup
    spec["tables"] = _tables(layer, model, symbols, observe, dtype, layers)
    return header, spec


def _tables(
    layer: calc.UnitTables,
    model: calc.ModelTables,
    symbols: dict[str, int],
    observe: list[int],
    dtype: str,
    layers: int,
) -> list[dict[str, Any]]:
    first = observe[:1]
    tables: list[dict[str, Any]] = [
        {
            "section": "参数列表（单层）",
            "title": "parameter list",
            "check": "param",
            "with": {"layer": 0, "ranks": first},
            "entries": [{**p.row(), **_DRAFTED} for p in layer.params],
        },
        {
            "section": "参数列表（单层）",
            "title": "layer totals",
            "check": "params_total",
            "with": {"layer": 0, "ranks": first},
            "entries": [
                {"id": "layer_numel", **{k: v for k, v in layer.params_total().items() if k != "bytes"}, **_DRAFTED},
                {
                    "id": "layer_bytes",
                    "says": f"{layer.full_storage_bytes / calc.MB:.2f} MB per layer in {dtype}",
                    "bytes": layer.params_total()["bytes"],
                    **_DRAFTED,
                },
            ],
        },
        {
            "section": "每个 rank 上的参数分片",
            "title": "shard per rank",
            "check": "param",
            "with": {"layer": 0},
            "entries": _shard_rows(layer, observe),
        },
        {
            "section": "每个 rank 上的参数分片",
            "title": "shard totals",
            "check": "params_total",
            "with": {"layer": 0},
            "entries": [{"id": f"rank{r}", "ranks": [r], **layer.params_total(r), **_DRAFTED} for r in observe],
        },
        {
            "section": "Forward 逐算子 Walkthrough",
            "title": "forward step shapes",
            "check": "step",
            "with": {"layer": "all", "dtype": dtype},
            "entries": [
                {"step": s.name, "shape": resolve_shape(s, symbols), **_INDEX_DTYPES.get(s.name, {}), **_DRAFTED}
                for s in _layer_steps(layer)
            ],
        },
        *_collective_tables(layer, model, layers),
        {
            "section": "Step 11：Post-Forward Hook → Reshard",
            "title": "parameter state",
            "check": "param_state",
            "with": {"layer": 0},
            "entries": [
                {"id": "after_step0", "point": "pre_forward", **layer.param_state("pre_forward", 0), **_DRAFTED},
                *(
                    {
                        "id": f"after_step11_rank{r}",
                        "ranks": [r],
                        "point": "post_forward",
                        **layer.param_state("post_forward", r),
                        **_DRAFTED,
                    }
                    for r in observe
                ),
            ],
        },
    ]
    return tables


# A sparse layer's integer steps: torch.topk's indices and a count of them (a sum of bools), int64
# whatever the parameters' dtype.
_INDEX_DTYPES = {"step9.topk_indices": {"dtype": "int64"}, "step9.tokens_per_expert": {"dtype": "int64"}}


def _layer_steps(layer: calc.UnitTables) -> list[Any]:
    """The steps layer 0 emits: a sparse layer's Step 9 is the router and experts (``MOE_STEPS``)."""
    if any(p.name in calc.EXPERT_PARAMS for p in layer.params):
        return [ALL_STEPS_BY_NAME[name] for name in MOE_LAYER_STEP_NAMES]
    return list(STEPS)


def _shard_rows(layer: calc.UnitTables, observe: list[int]) -> list[dict[str, Any]]:
    """One entry per parameter and distinct local shape among the observed ranks."""
    out = []
    for p in layer.params:
        by_shape: dict[tuple, list[int]] = {}
        for r in observe:
            by_shape.setdefault(p.local_shapes[r], []).append(r)
        for ranks in by_shape.values():
            row = p.row(ranks[0])
            entry = {
                "id": p.name if len(by_shape) == 1 else f"{p.name}.rank{ranks[0]}",
                "param": p.name,
                "ranks": ranks,
                "local_shape": row["local_shape"],
                "local_numel": row["local_numel"],
                "placements": [p.placement],
                **_DRAFTED,
            }
            out.append(entry)
    return out


def _collective_tables(layer: calc.UnitTables, model: calc.ModelTables, layers: int) -> list[dict[str, Any]]:
    by = {(c.phase, c.op): c for c in layer.collectives}
    if not by:  # a one-rank shard group issues no collective (torch FSDPParamGroup.unshard)
        return [
            {
                "section": "单层单步通信量汇总",
                "title": "per layer per step",
                "check": "collectives",
                "note": "one rank: FSDP2 copies the shard in place and issues no all-gather or reduce-scatter",
                "entries": [{"id": "no_collective", "select": {}, "count": 0, **_DRAFTED}],
            }
        ]

    def entry(id_: str, c: calc.Collective, keep: tuple[str, ...] | None = None) -> dict[str, Any]:
        fields = c.fields()
        if keep is not None:
            fields = {k: v for k, v in fields.items() if k in keep}
        select = {"phase": c.phase, "layer": 0} | ({"op": c.op} if c.phase == "backward" else {})
        return {"id": id_, "select": select, "count": 1, **fields, **_DRAFTED}

    ag_f, ag_b, rs = by["forward", "all_gather"], by.get(("backward", "all_gather")), by["backward", "reduce_scatter"]
    gather = {
        "section": "Step 0：Pre-Forward Hook → All-Gather 层参数",
        "title": "all-gather",
        "check": "collectives",
        "entries": [entry("forward_all_gather", ag_f)],
    }
    if layer.padding_numel:
        gather["note"] = (
            f"padded: the layer holds {layer.numel:,} elements; the all-gather carries "
            f"{layer.padded_numel:,} ({layer.padding_numel:,} padding)"
        )
    backward = [entry("backward_reduce_scatter", rs, ("dtype", "numel_in", "numel_out", "ring_bytes"))]
    if ag_b is not None:
        backward.insert(0, entry("backward_all_gather", ag_b, ("numel_out", "ring_bytes")))
    backward.append({"id": "optimizer_no_collective", "select": {"phase": "optimizer"}, "count": 0, **_DRAFTED})
    return [
        gather,
        {"section": "Backward 简述", "title": "backward", "check": "collectives", "entries": backward},
        {
            "section": "单层单步通信量汇总",
            "title": "per layer per step",
            "check": "collectives",
            "entries": [
                {"id": "layer_step_total", "select": {"layer": 0}, **layer.step_total(), **_DRAFTED},
                {
                    "id": "model_step_total",
                    "says": f"N_L × per-layer total, N_L = {layers}",
                    "select": {},
                    **model.step_total(),
                    **_DRAFTED,
                },
            ],
        },
    ]


def to_yaml(header: list[str], spec: dict[str, Any]) -> str:
    """The spec as YAML text: the header as ``#`` comments, then ``yaml.safe_dump`` of the data."""
    plain = json.loads(json.dumps(spec))  # no shared objects, so no YAML anchors and aliases
    body = yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, default_flow_style=None, width=10**6)
    return "".join(f"# {line}\n" for line in header) + body


def draft_spec(config: str, world_size: int, **options: Any) -> str:
    """The YAML text of a drafted spec (:func:`draft`, :func:`to_yaml`)."""
    return to_yaml(*draft(config, world_size, **options))
