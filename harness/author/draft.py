"""Draft a spec for a model config and world size from the closed-form calculator.

``python -m harness draft --config Qwen3-14B --world-size 128`` writes the walkthrough's tables
(parameter list, shard per rank, step shapes, collectives and bytes, per-layer per-step totals,
reshard state, whole-rank memory at the forward hooks) for that config (docs/writing-specs.md), each
figure computed by :mod:`harness.calculator`, never by running anything, and written with
``yaml.safe_dump`` under a comment header. Every entry is marked ``drafted: true``: the author
reviews it against their own document. The drafted spec passes when run, because the calculator
and FSDP2 agree; where they do not, the failing entry is the finding.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any, Mapping

import yaml

from harness import calculator as calc
from harness.language.suggest import closest_first, did_you_mean
from harness.load.setup import RunSetup
from model.config import KNOWN_CONFIGS, ConfigFile, Qwen3Config, known_config_name, read_config_file
from model.steps import ALL_STEPS_BY_NAME, MOE_LAYER_STEP_NAMES, STEPS, resolve_shape

REAL_RANKS_LIMIT = 8
"""Above this many ranks the draft uses the fake backend (one process, simulated ranks)."""

DEFAULT_DTYPE = "bfloat16"
"""The parameter dtype when neither ``--dtype`` nor the config file gives one (the released
Qwen3 checkpoints' ``torch_dtype``)."""

DTYPES = tuple(calc.DTYPE_BYTES)

DEFAULT_SETUP = RunSetup()
"""A spec's defaults (batch per rank 2, sequence length 8): a draft's unless told otherwise."""

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


UnitReshard = Mapping[str, "bool | int"]
"""Per-unit ``reshard_after_forward``: unit name (``layers.1``) -> True, False or a group size."""


def _check_dtype(option: str, value: str | None) -> None:
    if value is not None and value not in DTYPES:
        raise DraftError(f"{option} {value!r}: expected one of {', '.join(DTYPES)}")


def _layer_reshards(reshard: UnitReshard | None, layers: int) -> list[bool | int]:
    """``reshard_after_forward`` of each decoder layer's unit (True unless ``reshard`` names it).

    Raises:
        DraftError: a unit that is not a decoder layer of the draft, or a value that is not a
            bool or a positive int.
    """
    units = [f"layers.{i}" for i in range(layers)]
    out: list[bool | int] = [True] * layers
    for unit, value in (reshard or {}).items():
        if unit not in units:
            raise DraftError(
                f"--reshard-after-forward {unit}={str(value).lower()}: no FSDP unit {unit!r} in the draft; "
                f"{did_you_mean(unit, units)}units: {', '.join(closest_first(unit, units)[:8])}"
                + (f" (and {layers - 8} more)" if layers > 8 else "")
            )
        if not (isinstance(value, bool) or (isinstance(value, int) and value >= 1)):
            raise DraftError(f"--reshard-after-forward {unit}={value!r}: expected true, false or a group size >= 1")
        out[units.index(unit)] = value
    return out


def _command(config: str, world_size: int, options: Mapping[str, Any]) -> str:
    """The draft command line that reproduces this draft (options left at their default left out)."""
    words = [f"python -m harness draft --config {config} --world-size {world_size}"]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if name == "reshard_after_forward":
            words += [f"{flag} {unit}={str(v).lower()}" for unit, v in (value or {}).items()]
        elif value is True:
            words.append(flag)
        elif value is not None and value is not False:
            words.append(f"{flag} {value}")
    return " ".join(words)


def draft(
    config: str,
    world_size: int,
    *,
    layers: int = 2,
    dtype: str | None = None,
    param_dtype: str | None = None,
    reduce_dtype: str | None = None,
    reshard_after_forward: UnitReshard | None = None,
    batch_per_rank: int = DEFAULT_SETUP.batch_per_rank,
    seq_len: int = DEFAULT_SETUP.seq_len,
    backend: str = "auto",
    output: str | Path | None = None,
    tp: int = 1,
    sequence_parallel: bool = False,
) -> tuple[list[str], dict[str, Any]]:
    """The drafted spec as (comment header lines, spec mapping).

    Args:
        config: a name in ``model.KNOWN_CONFIGS``, its hub id, or a transformers
            ``config.json`` (or a YAML/JSON mapping of ``Qwen3Config`` fields); a MoE one
            (``Qwen3-30B-A3B``, a ``model_type: qwen3_moe`` file) drafts its sparse layers'
            fused experts and router, and their Step 9.
        world_size: N, the 1-D ``dp`` mesh size.
        layers: decoder layers to run (N_L).
        dtype: parameter (storage) dtype (bytes follow from it); None: the config file's
            ``torch_dtype`` / ``dtype``, else :data:`DEFAULT_DTYPE`.
        param_dtype, reduce_dtype: a ``MixedPrecisionPolicy`` for every unit (None: none):
            the all-gather and compute dtype, the gradient reduce-scatter dtype.
        reshard_after_forward: per-unit ``reshard_after_forward`` (``{"layers.1": False}``);
            units left out reshard (True).
        batch_per_rank, seq_len: B and L (default: a spec's, 2 and 8).
        backend: "auto" picks fake above :data:`REAL_RANKS_LIMIT` ranks, else the harness's auto.
        output: where the spec will be written: a config file is referenced relative to it.
        tp: tensor-parallel size: above 1 the mesh is ``[world_size / tp, tp]`` (dp, tp) with
            torchtitan's Qwen3 TP plan inside each layer, and the draft tabulates each rank's
            shards and placements, FSDP's collectives within dp and TP's within tp;
            ``sequence_parallel`` adds torchtitan's sequence parallelism (needs ``tp`` > 1).

    Raises:
        DraftError: an unknown config, an unreadable or refused config file, a dtype the
            harness does not run, a unit that is not a drafted decoder layer, a group size that
            does not divide the shard group, a TP size that does not divide the world or the
            heads, or TP of a MoE config.
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
    _check_dtype("--param-dtype", param_dtype)
    _check_dtype("--reduce-dtype", reduce_dtype)
    reshards = _layer_reshards(reshard_after_forward, layers)

    dims = calc.Dims(**{**calc.to_dims(cfg).__dict__, "num_hidden_layers": layers})
    if backend == "auto" and world_size > REAL_RANKS_LIMIT:
        backend = "fake"
    observe = [0, world_size - 1] if backend == "fake" and world_size > 1 else list(range(world_size))
    if sequence_parallel and tp < 2:
        raise DraftError("--sequence-parallel: splits the sequence over TP ranks; give --tp 2 or more")
    if tp > 1:
        per_layer: list[Any] = _tp_layers(
            name,
            dims,
            world_size,
            tp,
            reshards,
            sequence_parallel,
            batch_per_rank,
            seq_len,
            dtype,
            param_dtype,
            reduce_dtype,
        )
        mesh = {"shape": [world_size // tp, tp], "dim_names": ["dp", "tp"]}
    else:
        try:
            per_layer = [
                calc.layer_tables(
                    dims,
                    world_size,
                    storage_dtype=dtype,
                    gather_dtype=param_dtype,
                    reduce_dtype=reduce_dtype,
                    reshard_after_forward=reshards[i],
                    layer_idx=i,
                )
                for i in range(layers)
            ]
        except ValueError as exc:  # a group size that does not divide the shard group
            raise DraftError(f"--reshard-after-forward: {exc}") from None
        mesh = {"shape": [world_size], "dim_names": list(per_layer[0].mesh_dim_names)}
    symbols = calc.step_symbols(dims, batch_per_rank, seq_len)

    if read is None:
        label, setup_config = name, name
    else:  # a checkpoint folder's config.json is named after the folder
        file = Path(read.path)
        label = file.resolve().parent.name if file.name == "config.json" else file.stem
        setup_config = _config_reference(read.path, output)

    options = {
        "dtype": dtype if dtype_source == "--dtype" else None,
        "param_dtype": param_dtype,
        "reduce_dtype": reduce_dtype,
        "reshard_after_forward": reshard_after_forward,
        "tp": tp if tp > 1 else None,
        "sequence_parallel": sequence_parallel,
    }
    header = [
        f"Drafted on {_dt.date.today().isoformat()} by: {_command(config, world_size, options)}",
        "Every figure comes from harness/calculator.py (closed form), not from a run. Each entry is",
        "marked 'drafted: true': review it against your own document, then remove the mark.",
    ]
    if tp > 1:
        header.append(
            "Under TP the draft leaves out the step shapes, the reshard state and memory (tabulated for 1-D "
            "and HSDP meshes)."
        )
        description = (
            f"{label}: {layers} of its decoder layers, TP over {tp} ranks inside each, FSDP over "
            f"{world_size // tp}, drafted."
        )
    else:
        description = f"{label}: {layers} of its decoder layers as FSDP2 units on {world_size} ranks, drafted."
    if read is not None:
        header.append(
            f"Model config: {read.path} (transformers config.json); accepted and ignored: "
            f"{', '.join(read.ignored) or 'nothing'}."
        )
    if dtype_source != "--dtype":
        header.append(f"model dtype {dtype}: {dtype_source}.")
        description += f" The model dtype {dtype} is {dtype_source}."

    fsdp: dict[str, Any] = {"reshard_after_forward": True}
    if param_dtype is not None or reduce_dtype is not None:
        fsdp["mixed_precision"] = {
            k: v for k, v in (("param_dtype", param_dtype), ("reduce_dtype", reduce_dtype)) if v is not None
        }
    if reshard_after_forward:  # one unit per layer, each with its own setting where it has one
        fsdp["units"] = [
            f"layers.{i}" if r is True else {"modules": f"layers.{i}", "reshard_after_forward": r}
            for i, r in enumerate(reshards)
        ]
    setup: dict[str, Any] = {
        "model": {
            "config": setup_config,
            "overrides": {"num_hidden_layers": layers},
            "body": "decoder_layers",
            "dtype": dtype,
        },
        "mesh": mesh,
        **({"tensor_parallel": {"sequence_parallel": True} if sequence_parallel else {}} if tp > 1 else {}),
        "batch_per_rank": batch_per_rank,
        "seq_len": seq_len,
        "fsdp": fsdp,
        "optimizer": {"name": "sgd", "lr": 0.01},
    }
    if backend == "fake":
        setup["observe_ranks"] = observe

    spec: dict[str, Any] = {
        "spec": _slug(f"{label}_dp{world_size // tp}_tp{tp}" if tp > 1 else f"{label}_w{world_size}"),
        "title": f"{label}: {layers} decoder layers under FSDP2 "
        + (f"over TP on a {world_size // tp} x {tp} mesh (drafted)" if tp > 1 else f"on {world_size} ranks (drafted)"),
        "document": "drafted from harness/calculator.py; name the document you review it against",
        "description": description,
    }
    if backend != "auto":
        spec["backend"] = backend
    spec["setup"] = setup
    if tp > 1:
        spec["tables"] = _tp_tables(per_layer, observe, tp, {p.name: p.shape for p in calc.layer_params(dims)})
    else:
        spec["tables"] = _tables(per_layer, symbols, observe, param_dtype or dtype)
    return header, spec


def _tp_layers(
    name: str | None,
    dims: calc.Dims,
    world: int,
    tp: int,
    reshards: list[bool | int],
    sequence_parallel: bool,
    batch_per_rank: int,
    seq_len: int,
    dtype: str,
    param_dtype: str | None,
    reduce_dtype: str | None,
) -> list[calc.TPLayerTables]:
    """Each layer's :func:`calc.tp_layer_tables` on ``[world / tp, tp]``; DraftError for a TP size the
    world, the config or the sequence does not allow."""
    if world % tp:
        raise DraftError(f"--tp {tp}: does not divide --world-size {world}")
    if dims.num_experts:
        raise DraftError(f"--tp {tp}: the TP plan covers dense Qwen3 layers; {name or 'this config'} is MoE")
    problem = calc.tp_divisibility_problem(dims, tp)
    if problem:
        raise DraftError(f"--tp {tp}: {problem}")
    try:
        return [
            calc.tp_layer_tables(
                dims,
                (world // tp, tp),
                batch_per_rank=batch_per_rank,
                seq_len=seq_len,
                storage_dtype=dtype,
                gather_dtype=param_dtype,
                reduce_dtype=reduce_dtype,
                reshard_after_forward=reshard,
                layer_idx=i,
                sequence_parallel=sequence_parallel,
            )
            for i, reshard in enumerate(reshards)
        ]
    except ValueError as exc:
        option = "--seq-len" if "seq_len" in str(exc) else "--reshard-after-forward"
        raise DraftError(f"{option}: {exc}") from None


def _tp_tables(
    per_layer: list[calc.TPLayerTables], observe: list[int], tp: int, full: dict[str, tuple[int, ...]]
) -> list[dict[str, Any]]:
    """The parameters' full shapes, each observed rank's shards, FSDP's collectives within dp and
    TP's all-reduces within tp (per phase, over every layer)."""
    layer = per_layer[0]
    shards: list[dict[str, Any]] = []
    for p in layer.fsdp.params:
        by_row: dict[tuple, list[int]] = {}
        for r in observe:
            by_row.setdefault(p.local_shapes[r // tp], []).append(r)
        for shape, ranks in by_row.items():
            shards.append(
                {
                    "id": p.name if len(by_row) == 1 else f"{p.name}.rank{ranks[0]}",
                    "param": p.name,
                    "ranks": ranks,
                    "full_shape": list(full[p.name]),
                    "local_shape": list(shape),
                    "placements": list(layer.placements[p.name]),
                    "mesh_dim_names": list(layer.mesh_dims[p.name]),
                    **_DRAFTED,
                }
            )
    fsdp_entries = []
    for i, t in enumerate(per_layer):
        for c in t.fsdp.collectives:
            select = {"phase": c.phase, "op": c.op, "mesh_dim": c.mesh_dim, "layer": i}
            fsdp_entries.append(
                {"id": f"layer{i}_{c.phase}_{c.op}", "select": select, "count": 1, **c.fields(), **_DRAFTED}
            )
    tp_entries = []
    kinds = dict.fromkeys((c.phase, c.op) for t in per_layer for c in t.tp_collectives)
    for phase, op in kinds:
        chosen = [c for t in per_layer for c in t.tp_collectives if (c.phase, c.op) == (phase, op)]
        tp_entries.append(
            {
                "id": f"tp_{op}s_in_{phase}",
                "select": {"phase": phase, "op": op, "mesh_dim": "tp"},
                "count": len(chosen),
                "group_size": tp,
                "total_buffer_bytes": sum(c.buffer_bytes for c in chosen),
                **_DRAFTED,
            }
        )
    return [
        {
            "section": SECTION_SHARDS,
            "title": "shard per rank",
            "check": "param",
            "with": {"layer": 0},
            "entries": shards,
        },
        {
            "section": SECTION_SUMMARY,
            "title": "FSDP's collectives, within dp",
            "check": "collectives",
            "entries": fsdp_entries,
        },
        {
            "section": SECTION_SUMMARY,
            "title": "TP's collectives, within tp",
            "check": "collectives",
            "entries": tp_entries,
        },
    ]


# English section names: the walkthrough's own (Chinese) names belong to specs that cite it.
SECTION_PARAMS = "Parameters of one layer"
SECTION_SHARDS = "Shards on each rank"
SECTION_FORWARD = "Forward, step by step"
SECTION_GATHER = "Step 0: the pre-forward all-gather"
SECTION_RESHARD = "Step 11: the post-forward reshard"
SECTION_BACKWARD = "Backward"
SECTION_SUMMARY = "Communication per layer per step"
SECTION_MEMORY = "Memory (FSDPMemTracker)"


def _representatives(per_layer: list[calc.UnitTables]) -> list[int]:
    """The first layer of each distinct ``reshard_after_forward``: a layer like an earlier one
    would repeat its entries."""
    seen: dict[Any, int] = {}
    for i, t in enumerate(per_layer):
        seen.setdefault((type(t.reshard_after_forward), t.reshard_after_forward), i)
    return sorted(seen.values())


def _tables(
    per_layer: list[calc.UnitTables],
    symbols: dict[str, int],
    observe: list[int],
    compute_dtype: str,
) -> list[dict[str, Any]]:
    layer = per_layer[0]
    first = observe[:1]
    tables: list[dict[str, Any]] = [
        {
            "section": SECTION_PARAMS,
            "title": "parameter list",
            "check": "param",
            "with": {"layer": 0, "ranks": first},
            "entries": [{**p.row(), **_DRAFTED} for p in layer.params],
        },
        {
            "section": SECTION_PARAMS,
            "title": "layer totals",
            "check": "params_total",
            "with": {"layer": 0, "ranks": first},
            "entries": [
                {"id": "layer_numel", **{k: v for k, v in layer.params_total().items() if k != "bytes"}, **_DRAFTED},
                {
                    "id": "layer_bytes",
                    "says": f"{layer.full_storage_bytes / calc.MB:.2f} MB per layer in {layer.storage_dtype}",
                    "bytes": layer.params_total()["bytes"],
                    **_DRAFTED,
                },
            ],
        },
        {
            "section": SECTION_SHARDS,
            "title": "shard per rank",
            "check": "param",
            "with": {"layer": 0},
            "entries": _shard_rows(layer, observe),
        },
        {
            "section": SECTION_SHARDS,
            "title": "shard totals",
            "check": "params_total",
            "with": {"layer": 0},
            "entries": [{"id": f"rank{r}", "ranks": [r], **layer.params_total(r), **_DRAFTED} for r in observe],
        },
        {
            "section": SECTION_FORWARD,
            "title": "forward step shapes",
            "check": "step",
            "with": {"layer": "all", "dtype": compute_dtype},
            "entries": [
                {"step": s.name, "shape": resolve_shape(s, symbols), **_INDEX_DTYPES.get(s.name, {}), **_DRAFTED}
                for s in _layer_steps(layer)
            ],
        },
        *_collective_tables(per_layer),
        {
            "section": SECTION_RESHARD,
            "title": "parameter state",
            "check": "param_state",
            "entries": _param_state_rows(per_layer, observe),
        },
        *_memory_tables(per_layer),
    ]
    return tables


def _prefix(i: int, reps: list[int]) -> str:
    """Entry ids of layer 0 keep the plain names; another representative layer's say which."""
    return "" if i == reps[0] else f"layer{i}_"


def _param_state_rows(per_layer: list[calc.UnitTables], observe: list[int]) -> list[dict[str, Any]]:
    reps = _representatives(per_layer)
    rows: list[dict[str, Any]] = []
    for i in reps:
        t, pre = per_layer[i], _prefix(i, reps)
        rows.append({"id": f"{pre}after_step0", "layer": i, "point": "pre_forward", **t.param_state("pre_forward", 0)})
        if isinstance(t.reshard_after_forward, bool):  # a smaller group's reshard is not tabulated
            rows += [
                {
                    "id": f"{pre}after_step11_rank{r}",
                    "layer": i,
                    "ranks": [r],
                    "point": "post_forward",
                    **t.param_state("post_forward", r),
                }
                for r in observe
            ]
    return [{**row, **_DRAFTED} for row in rows]


def _gathered_bytes(t: calc.UnitTables) -> int:
    """FSDPMemTracker's bytes of a unit's unsharded parameters: the all-gather's output, padding included."""
    return t.padded_numel * calc.dtype_bytes(t.gather_dtype)


def _memory_tables(per_layer: list[calc.UnitTables]) -> list[dict[str, Any]]:
    """Whole-rank FSDPMemTracker bytes the calculator can predict: every unit's padded shards,
    the unsharded layers at each representative layer's forward hooks (a layer kept unsharded
    after forward still counts at later layers' hooks) and the gradient shards after backward.
    A layer resharded to a smaller group (an int) is left out: its bytes there are not tabulated."""
    sharded = sum(t.padded_sharded_bytes for t in per_layer)
    # gradients are reduced into shards in the parameters' own dtype (padded, like the parameters)
    entries: list[dict[str, Any]] = [
        {
            "id": "after_fully_shard",
            "unit": "root",
            "state": "After fully_shard",
            "sharded_param": sharded,
            "unsharded_param": 0,
        },
        {
            "id": "grads_sharded_after_backward",
            "layer": 0,
            "state": "After Post-Backward",
            "sharded_grad": sharded,
            "unsharded_param": 0,
        },
    ]
    reps = _representatives(per_layer)
    for i in reps:
        if any(not isinstance(t.reshard_after_forward, bool) for t in per_layer[: i + 1]):
            continue
        kept = sum(_gathered_bytes(t) for t in per_layer[:i] if t.reshard_after_forward is False)
        own = _gathered_bytes(per_layer[i])
        pre = _prefix(i, reps)
        entries += [
            {
                "id": f"{pre}unsharded_after_step0",
                "layer": i,
                "state": "After Pre-Forward",
                "unsharded_param": kept + own,
                "sharded_param": sharded,
            },
            {
                "id": f"{pre}unsharded_after_step11",
                "layer": i,
                "state": "After Post-Forward",
                "unsharded_param": kept + (own if per_layer[i].reshard_after_forward is False else 0),
            },
        ]
    return [
        {
            "section": SECTION_MEMORY,
            "title": "memory",
            "check": "memory",
            "note": "a snapshot counts the whole rank: every layer's shards, and every layer still unsharded",
            "entries": [{**e, **_DRAFTED} for e in entries],
        }
    ]


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


def _collective_tables(per_layer: list[calc.UnitTables]) -> list[dict[str, Any]]:
    """Step 0's all-gather, the backward's collectives and the per-layer and per-step totals,
    for each representative layer (layers set alike repeat layer 0's entries)."""
    reps = _representatives(per_layer)
    if not per_layer[0].collectives:  # a one-rank shard group issues no collective (torch FSDPParamGroup.unshard)
        return [
            {
                "section": SECTION_SUMMARY,
                "title": "per layer per step",
                "check": "collectives",
                "note": "one rank: FSDP2 copies the shard in place and issues no all-gather or reduce-scatter",
                "entries": [{"id": "no_collective", "select": {}, "count": 0, **_DRAFTED}],
            }
        ]

    def entry(id_: str, i: int, c: calc.Collective, keep: tuple[str, ...] | None = None) -> dict[str, Any]:
        fields = c.fields()
        if keep is not None:
            fields = {k: v for k, v in fields.items() if k in keep}
        select = {"phase": c.phase, "layer": i} | ({"op": c.op} if c.phase == "backward" else {})
        return {"id": id_, "select": select, "count": 1, **fields, **_DRAFTED}

    gather: list[dict[str, Any]] = []
    backward: list[dict[str, Any]] = []
    totals: list[dict[str, Any]] = []
    for i in reps:
        t, pre = per_layer[i], _prefix(i, reps)
        by = {(c.phase, c.op): c for c in t.collectives}
        gather.append(entry(f"{pre}forward_all_gather", i, by["forward", "all_gather"]))
        ag_b = by.get(("backward", "all_gather"))
        if ag_b is not None:
            backward.append(entry(f"{pre}backward_all_gather", i, ag_b, ("numel_out", "ring_bytes")))
        else:  # kept unsharded after forward: the backward needs no all-gather
            select = {"phase": "backward", "layer": i, "op": "all_gather"}
            backward.append({"id": f"{pre}no_backward_all_gather", "select": select, "count": 0, **_DRAFTED})
        rs = by["backward", "reduce_scatter"]
        backward.append(entry(f"{pre}backward_reduce_scatter", i, rs, ("dtype", "numel_in", "numel_out", "ring_bytes")))
        totals.append({"id": f"{pre}layer_step_total", "select": {"layer": i}, **t.step_total(), **_DRAFTED})
    backward.append({"id": "optimizer_no_collective", "select": {"phase": "optimizer"}, "count": 0, **_DRAFTED})
    sent = [t.total_ring_bytes for t in per_layer]
    added = f"{len(sent)} × the per-layer total" if len(set(sent)) == 1 else "the sum of each layer's own total"
    totals.append(
        {
            "id": "model_step_total",
            "says": f"N_L = {len(per_layer)} layers: {added}",
            "select": {},
            "total_ring_bytes": _whole(sum(sent)),
            **_DRAFTED,
        }
    )
    gather_table = {"section": SECTION_GATHER, "title": "all-gather", "check": "collectives", "entries": gather}
    layer = per_layer[0]
    if layer.padding_numel:
        gather_table["note"] = (
            f"padded: the layer holds {layer.numel:,} elements; the all-gather carries "
            f"{layer.padded_numel:,} ({layer.padding_numel:,} padding)"
        )
    return [
        gather_table,
        {"section": SECTION_BACKWARD, "title": "backward", "check": "collectives", "entries": backward},
        {"section": SECTION_SUMMARY, "title": "per layer per step", "check": "collectives", "entries": totals},
    ]


def _whole(value: int | float) -> int | float:
    """An int where the bytes are whole (a spec reads 7081344, not 7081344.0)."""
    return int(value) if float(value).is_integer() else value


def to_yaml(header: list[str], spec: dict[str, Any]) -> str:
    """The spec as YAML text: the header as ``#`` comments, then ``yaml.safe_dump`` of the data."""
    plain = json.loads(json.dumps(spec))  # no shared objects, so no YAML anchors and aliases
    body = yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, default_flow_style=None, width=10**6)
    return "".join(f"# {line}\n" for line in header) + body


def draft_spec(config: str, world_size: int, **options: Any) -> str:
    """The YAML text of a drafted spec (:func:`draft`, :func:`to_yaml`)."""
    return to_yaml(*draft(config, world_size, **options))
