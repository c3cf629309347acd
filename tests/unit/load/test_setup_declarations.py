"""The setup's declarations are the one definition of its keys: the shipped schema's setup part and
docs/setup-keys.md's table agree with them, defaults come from the dataclass fields, and
``from_mapping`` converts every declared key by its type (harness/load/declare.py)."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest

from harness.calculator import DTYPE_BYTES
from harness.contract.names import BACKENDS, BANDWIDTH_OPS
from harness.load import docs
from harness.load.declare import key_rows, object_schema
from harness.load.docs import SCHEMA_PATH, dump_schema
from harness.load.schedule import ClipGradNorm, Schedule, ScheduleStep
from harness.load.setup import (
    BandwidthSetup,
    FSDPSetup,
    MixedPrecision,
    ModelSetup,
    RunSetup,
    SetupError,
    StateDictSetup,
)


def test_shipped_schema_matches_the_declarations():
    shipped = SCHEMA_PATH.read_text(encoding="utf-8")
    assert shipped == dump_schema(docs.generated_schema(json.loads(shipped))), (
        f"spec.schema.json is out of date: run {docs.COMMAND}"
    )


def test_setup_keys_page_matches_the_declarations():
    page = docs.SETUP_KEYS_PAGE.read_text(encoding="utf-8")
    assert page == docs.setup_keys_page(page), f"docs/setup-keys.md's table is out of date: run {docs.COMMAND}"


def test_a_stale_schema_or_table_is_caught():
    """The two checks above can fail: a default edited by hand in the shipped files is rewritten."""
    shipped = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    shipped["$defs"]["setup"]["properties"]["seq_len"]["default"] = 9
    shipped["properties"]["backend"]["enum"] = ["gloo"]
    regenerated = docs.generated_schema(shipped)
    assert regenerated["$defs"]["setup"]["properties"]["seq_len"]["default"] == 8
    assert regenerated["properties"]["backend"]["enum"] == list(BACKENDS)
    page = docs.SETUP_KEYS_PAGE.read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| `setup.seq_len` |"))
    assert "`8`" in row
    stale = page.replace(row, row.replace("`8`", "`9`"))
    assert docs.setup_keys_page(stale) == page
    with pytest.raises(ValueError, match="docs/setup-keys.md lacks the markers"):
        docs.setup_keys_page(stale.replace(docs.SETUP_END, ""))


def test_every_key_is_in_the_setup_keys_table_with_its_dataclass_default():
    rows = dict(key_rows(RunSetup))
    for path, cls, name in [
        ("setup.batch_per_rank", RunSetup, "batch_per_rank"),
        ("setup.mesh.shape", RunSetup, "mesh_shape"),
        ("setup.optimizer.lr", None, None),
        ("setup.bandwidth.warmup", BandwidthSetup, "warmup"),
        ("setup.schedule.steps[].zero_grad", ScheduleStep, "zero_grad"),
        ("setup.schedule.steps[].clip_grad_norm.norm_type", ClipGradNorm, "norm_type"),
        ("setup.fsdp.mixed_precision.cast_forward_inputs", MixedPrecision, "cast_forward_inputs"),
    ]:
        assert path in rows, path
        if cls is not None:
            default = {f.name: f.default for f in dataclasses.fields(cls)}[name]
            assert rows[path]["default"] == json.loads(json.dumps(default)), path
    assert all(schema.get("description") for schema in rows.values()), [
        p for p, s in rows.items() if not s.get("description")
    ]
    assert "setup.record_errors" not in rows  # set by the loader, not a spec key
    assert "setup.fsdp.defaults" not in rows and "setup.fsdp.checkpoint" in rows  # the unit options, spread


def test_enums_come_from_their_tables():
    setup = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))["$defs"]["setup"]["properties"]
    assert setup["model"]["properties"]["dtype"]["enum"] == list(DTYPE_BYTES)
    assert setup["bandwidth"]["properties"]["dtype"]["enum"] == list(DTYPE_BYTES)
    assert setup["fsdp"]["properties"]["mixed_precision"]["properties"]["param_dtype"]["enum"] == list(DTYPE_BYTES)
    assert setup["bandwidth"]["properties"]["ops"]["items"]["enum"] == list(BANDWIDTH_OPS)
    top = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))["properties"]
    assert top["backend"]["enum"] == list(BACKENDS)


def test_an_empty_setup_is_every_default():
    assert RunSetup.from_mapping({}) == RunSetup()
    assert Schedule.from_mapping({}) == (Schedule(), [])


def test_every_declared_key_is_converted_by_its_type():
    written = {
        "model": {
            "config": "walkthrough",
            "overrides": {"num_hidden_layers": 2},
            "body": "causal_lm",
            "dtype": "bfloat16",
        },
        "mesh": {"shape": [2, 2], "dim_names": ["dp_replicate", "dp_shard"]},
        "batch_per_rank": 3,
        "seq_len": 4,
        "seed": 7,
        "observe_ranks": [0, 3],
        "numerics": False,
        "numerics_reference": "each_rank",
        "init": "meta",
        "track_memory": False,
        "optimizer": {"name": "adamw", "lr": 1},
        "fsdp": {
            "reshard_after_forward": 2,
            "root_reshard_after_forward": False,
            "mixed_precision": {"param_dtype": "bfloat16", "cast_forward_inputs": False},
            "offload_policy": {"pin_memory": False},
            "checkpoint": True,
            "gradient_divide_factor": 4,
            "units": ["model.layers.*", ["model.norm", "lm_head"], {"modules": "root", "compile": True}],
            "forward_prefetch": {"model.layers.0": ["model.layers.1"]},
            "backward_prefetch": {"root": ["model.layers.1"]},
        },
        "freeze": {"params": ["lm_head.weight"], "after_fully_shard": True},
        "bandwidth": {
            "ops": ["all_reduce"],
            "sizes": [{"name": "s", "numel": 8}],
            "dtype": "float32",
            "warmup": 0,
            "iterations": 1,
            "cpu_max_bytes": None,
            "step": False,
        },
        "state_dict": {"round_trip": True, "reload_world_sizes": [2]},
        "schedule": {
            "loss": "sum",
            "steps": [
                {
                    "microbatches": 2,
                    "used_only_in": {"model.layers.1": [1]},
                    "clip_grad_norm": {"max_norm": 1},
                    "zero_grad": "zeros",
                    "unshard": ["root"],
                    "repeat": 2,
                }
            ],
        },
    }
    jsonschema.validate(written, object_schema(RunSetup))
    setup = RunSetup.from_mapping(written)
    assert setup.model == ModelSetup("walkthrough", {"num_hidden_layers": 2}, "causal_lm", "bfloat16")
    assert (setup.mesh_shape, setup.mesh_dim_names, setup.observe_ranks) == (
        (2, 2),
        ("dp_replicate", "dp_shard"),
        (0, 3),
    )
    assert setup.optimizer.lr == 1.0 and isinstance(setup.optimizer.lr, float)
    fsdp = setup.fsdp
    assert fsdp.mixed_precision == MixedPrecision(param_dtype="bfloat16", cast_forward_inputs=False)
    assert fsdp.defaults == (("checkpoint", True), ("gradient_divide_factor", 4))  # in the order written
    assert fsdp.forward_prefetch == (("model.layers.0", ("model.layers.1",)),)
    assert fsdp.backward_prefetch == (("", ("model.layers.1",)),)  # 'root' is the root, ""
    assert [u.grouped for u in fsdp.units] == [False, True, False] and fsdp.units[2].given == (("compile", True),)
    plans = setup.unit_plan(2)
    assert plans[0].options.gradient_divide_factor == 4.0 and plans[-1].options.compile
    assert setup.bandwidth.sizes[0].numel == 8 and setup.bandwidth.ops == ("all_reduce",)
    assert setup.state_dict == StateDictSetup(True, (2,))
    step = setup.schedule.steps[0]
    assert (step.used_only_in, step.clip_grad_norm, step.zero_grad, step.unshard) == (
        {"model.layers.1": (1,)},
        ClipGradNorm(1.0),
        "zeros",
        ("root",),
    )
    assert setup.schedule.microbatches() == (2, 2)
    assert isinstance(setup.fsdp, FSDPSetup)


@pytest.mark.parametrize(
    "written, key_path, words",
    [
        (
            {"mesh": {"shape": [2, 2]}},
            "setup.mesh.dim_names",
            "expected 2 names for shape [2, 2], got none (the default ['dp'] is for a 1-D mesh)",
        ),
        ({"state_dict": {"reload_world_sizes": [2]}}, "setup.state_dict.reload_world_sizes", "needs the round trip"),
        (
            {"state_dict": {"round_trip": True, "reload_world_sizes": [4]}},
            "setup.state_dict.reload_world_sizes",
            "world size 4 is the run's own",
        ),
        (
            {"bandwidth": {"sizes": [{"name": "step", "numel": 1}]}},
            "setup.bandwidth.sizes[0].name",
            "is reserved for the step's own collectives",
        ),
        (
            {"schedule": {"steps": [{}, {"microbatches": 1, "used_only_in": {"layers.0": [1]}}]}},
            "setup.schedule.steps[1].used_only_in.layers.0",
            "microbatch(es) [1] do not exist",
        ),
    ],
)
def test_cross_key_rules_name_the_key(written, key_path, words):
    with pytest.raises(SetupError) as info:
        RunSetup.from_mapping(written)
    assert info.value.key_path == key_path and words in info.value.message, info.value.errors
