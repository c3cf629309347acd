"""The instrument without real ranks: label parsing, attribution, the schema, the fake backend.

The simulated runs here are in-process (fake process group + FakeTensorMode): a Qwen3-32B
layer at 1024 ranks takes about a second on this 2-core machine.
"""

from __future__ import annotations

import pytest

from harness.contract.observation import ObservationError, validate_observation
from harness.load.setup import ModelSetup, RunSetup
from harness.run.launch.errors import RunError
from harness.run.launch.joined import _check_world_size, joined_world
from harness.run.rank.recorders.collectives import AttributionError, Span, attribute, parse_fsdp_label
from harness.run.runner import run_setup

# --- FSDP's profiler labels (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py) ----------


@pytest.mark.parametrize(
    "label, expected",
    [
        ("FSDP::all_gather (layers.0)", ("FSDP::all_gather", "layers.0")),
        ("FSDP::pre_forward (model.layers.27)", ("FSDP::pre_forward", "model.layers.27")),
        ("FSDP::post_backward_reduce (layers.1) [pg=4]", ("FSDP::post_backward_reduce", "layers.1")),
        ("FSDP::all_gather", ("FSDP::all_gather", "")),  # _with_fqn drops the suffix for the root
        ("FSDP::backward_prefetch for layers.0", ("FSDP::backward_prefetch", "layers.0")),
        ("FSDP::backward_prefetch for ", ("FSDP::backward_prefetch", "")),
        ("FSDP::post_backward_rs_wait ()", ("FSDP::post_backward_rs_wait", "")),
        ("FSDP::root_pre_forward", ("FSDP::root_pre_forward", None)),
        ("FSDP::root_post_backward_callback", ("FSDP::root_post_backward_callback", None)),
    ],
)
def test_fsdp_labels_name_their_unit(label, expected):
    assert parse_fsdp_label(label) == expected


def _record(op="c10d._allgather_base_.default"):
    return {"index": 0, "c10d_op": op}


def test_attribution_takes_the_innermost_labels_and_the_outermost_duplicate():
    spans = [
        Span("FSDP::pre_backward (layers.1)", 0, 100, 1),
        Span("FSDP::backward_prefetch for layers.0", 10, 90, 1),
        Span("FSDP::all_gather (layers.0)", 20, 80, 1),
        Span("c10d::_allgather_base_", 30, 70, 1),
        Span("c10d::_allgather_base_", 31, 69, 1),  # the same op, one dispatch mode deeper
        Span("FSDP::all_gather (layers.9)", 30, 70, 2),  # another thread: not enclosing
    ]
    (rec,) = attribute([_record()], spans)
    assert rec["unit"] == "layers.0"
    assert rec["fsdp_label"] == "FSDP::all_gather"
    assert rec["hook"] == "backward_prefetch"
    assert rec["fsdp_labels"] == [
        "FSDP::pre_backward (layers.1)",
        "FSDP::backward_prefetch for layers.0",
        "FSDP::all_gather (layers.0)",
    ]


def test_a_label_without_a_module_name_takes_the_unit_of_the_loops_call():
    """Before the root's lazy init FSDP's labels carry no module name: a manual unshard() of layers.0
    then read as the root's all-gather (specs/unshard_async.yaml)."""
    spans = [
        Span("HARNESS::call unshard layers.0", 0, 100, 1),
        Span("FSDP::all_gather", 10, 90, 1),
        Span("c10d::_allgather_base_", 20, 80, 1),
        Span("FSDP::all_gather", 200, 290, 1),  # outside every call: the root's
        Span("c10d::_allgather_base_", 210, 280, 1),
    ]
    called, root = attribute([_record(), _record()], spans)
    assert (called["unit"], called["hook"], root["unit"]) == ("layers.0", None, "")
    assert called["fsdp_labels"] == ["FSDP::all_gather"]  # the loop's span is not an FSDP label


def test_attribution_refuses_lists_that_disagree():
    with pytest.raises(AttributionError, match="dispatcher saw 2 collectives, the profiler 1"):
        attribute([_record(), _record()], [Span("c10d::_allgather_base_", 0, 1, 1)])
    with pytest.raises(AttributionError, match="at the same position"):
        attribute([_record()], [Span("c10d::_reduce_scatter_base_", 0, 1, 1)])


def test_validation_lists_each_violation_with_its_path():
    with pytest.raises(ObservationError) as info:
        validate_observation(
            {"format": "fsdp2-observation/1", "environment": {}, "setup": {}, "fsdp_units": [], "ranks": [{"rank": -1}]}
        )
    text = str(info.value)
    assert "$.environment: 'torch_version' is a required property" in text
    assert "$.ranks[0].rank: -1 is less than the minimum of 0" in text


def test_joined_world_needs_rank_world_size_and_master_addr():
    assert joined_world({"RANK": "0", "WORLD_SIZE": "2"}) is None
    assert joined_world(
        {"RANK": "3", "WORLD_SIZE": "8", "MASTER_ADDR": "n0", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    ) == {
        "rank": 3,
        "world_size": 8,
        "local_rank": 1,
        "local_world_size": 4,
        "local_rank_variable": "LOCAL_RANK",
    }


@pytest.mark.parametrize(
    "world_size, per_node, shape",
    [(6, 3, "2 nodes x 3 processes"), (2, 1, "2 nodes x 1 process"), (5, 2, "2 processes on this node")],
)
def test_a_joined_world_of_another_size_is_refused_with_its_shape(world_size, per_node, shape):
    setup = RunSetup.from_mapping({"mesh": {"shape": [4]}})
    _check_world_size(setup, {"world_size": 4, "local_world_size": 2})  # the spec's size: no error
    with pytest.raises(RunError) as info:
        _check_world_size(setup, {"world_size": world_size, "local_world_size": per_node})
    assert str(info.value).startswith(
        f"joined a world of {world_size} ranks ({shape}), but setup.mesh.shape [4] needs 4: launch 4 ranks"
    )
    assert info.value.rank is None  # a world error, printed once


# --- the fake backend -----------------------------------------------------------------------------


def test_fake_backend_rejects_ranks_outside_the_world():
    with pytest.raises(RunError, match=r"observe_ranks \[4\]"):
        run_setup(RunSetup(observe_ranks=(4,)), backend="fake")


def test_qwen3_32b_layer_at_1024_simulated_ranks_pads_its_all_gather():
    """Measured with torch 2.13's FSDP2 (each parameter's dim 0 padded to a multiple of 1024):
    487,600,128 gathered elements for 487,598,336 held."""
    setup = RunSetup(
        model=ModelSetup(config="Qwen3-32B", overrides={"num_hidden_layers": 1}),
        mesh_shape=(1024,),
        observe_ranks=(0, 1023),
    )
    doc = run_setup(setup, backend="fake")
    env = doc["environment"]
    assert (env["simulated"], env["launcher"], env["backend"], env["observed_ranks"]) == (
        True,
        "simulated",
        "fake",
        [0, 1023],
    )
    first, last = doc["ranks"]
    held = sum(p["numel"] for p in first["params"])
    assert held == 487_598_336
    for r in (first, last):
        assert r["numerics"] is None
        forward = [c for c in r["collectives"] if c["phase"] == "forward"]
        assert [(c["op"], c["unit"], c["numel_out"], c["numel_in"], c["buffer_bytes"]) for c in forward] == [
            ("all_gather", "layers.0", 487_600_128, 487_600_128 // 1024, 2 * 487_600_128)
        ]
        backward = [(c["op"], c["unit"]) for c in r["collectives"] if c["phase"] == "backward"]
        assert backward == [("all_gather", "layers.0"), ("reduce_scatter", "layers.0")]
        assert not [c for c in r["collectives"] if c["phase"] in ("setup", "optimizer")]
    q_norm = "layers.0.self_attn.q_norm.weight"
    local = {r["rank"]: next(p["local_shape"] for p in r["params"] if p["fqn"] == q_norm) for r in doc["ranks"]}
    assert local == {0: [1], 1023: [0]}  # 128 rows: one each for ranks 0-127, none for the rest
