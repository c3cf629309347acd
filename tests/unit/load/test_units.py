"""setup.fsdp.units and the other unit options: resolution without torch, load errors naming the key.

The runs themselves are the specs (specs/tail_unit*.yaml, ...); here the plan the loader and the
rank step share (harness/load/units.py) and its refusals.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.load.setup import RunSetup, SetupError
from harness.load.spec import SpecError, load_spec
from harness.load.units import match_modules, match_params
from model.names import module_paths
from tests.support.specs import TINY_DIMS

TINY = dict(TINY_DIMS, vocab_size=128)


def _setup(fsdp, body="causal_lm"):
    return RunSetup.from_mapping({"model": {"body": body, "overrides": TINY}, "fsdp": fsdp})


def test_globs_match_one_component_in_module_order():
    paths = module_paths("causal_lm", 3)
    assert match_modules("model.layers.*", paths) == ["model.layers.0", "model.layers.1", "model.layers.2"]
    assert match_modules("model.layers.*.self_attn", paths)[1] == "model.layers.1.self_attn"
    assert match_modules("model.layers", paths) == ["model.layers"]
    assert match_modules("layers.*", paths) == []
    assert match_params("model.layers.*.self_attn.*", ["model.layers.0.self_attn.q_proj.weight"]) == []
    assert match_params("model.layers.*.self_attn.**", ["model.layers.0.self_attn.q_proj.weight"]) == [
        "model.layers.0.self_attn.q_proj.weight"
    ]


def test_default_units_are_each_layer_then_the_root():
    plan = _setup({"reshard_after_forward": 2}).unit_plan(2)
    assert [(p.name, p.role, p.layer, p.options.reshard_after_forward) for p in plan] == [
        ("model.layers.0", "layer", 0, 2),
        ("model.layers.1", "layer", 1, 2),
        ("", "root", None, None),
    ]


def test_a_list_is_one_unit_named_as_torch_names_it():
    plan = _setup(
        {
            "units": [
                "model.layers.*",
                {
                    "modules": ["lm_head", "model.norm"],
                    "reshard_after_forward": None,
                    "mp_policy": {"param_dtype": "bfloat16"},
                },
                "model.embed_tokens",
                {"modules": "root", "reshard_after_forward": True},
            ]
        }
    ).unit_plan(2)
    assert [(p.name, p.role) for p in plan] == [
        ("model.layers.0", "layer"),
        ("model.layers.1", "layer"),
        ("model.norm, lm_head", "module"),
        ("model.embed_tokens", "module"),
        ("", "root"),
    ]
    tail = plan[2]
    assert tail.paths == ("model.norm", "lm_head")  # module order, not the order written
    assert tail.options.reshard_after_forward is None and tail.options.mp_policy.param_dtype == "bfloat16"
    assert plan[3].options.reshard_after_forward is True and plan[3].options.mp_policy is None
    assert plan[-1].options.reshard_after_forward is True


def test_unit_options_default_to_the_fsdp_mapping():
    plan = _setup(
        {
            "gradient_divide_factor": 8,
            "force_sum_reduction_for_comms": True,
            "units": [{"modules": "model.layers.*", "gradient_divide_factor": 1}],
        }
    ).unit_plan(2)
    assert [p.options.gradient_divide_factor for p in plan] == [1.0, 1.0, 8.0]
    assert {p.options.force_sum_reduction_for_comms for p in plan} == {True}


@pytest.mark.parametrize(
    "fsdp, key, words",
    [
        ({"units": ["model.layer.*"]}, "setup.fsdp.units[0].modules", "'model.layer.*' matches no module"),
        (
            {"units": ["model.layers.*", ["model.layers.1", "lm_head"]]},
            "setup.fsdp.units[1].modules[0]",
            "module 'model.layers.1' is already in units[0]",
        ),
        ({"units": ["root", "model.layers.*"]}, "setup.fsdp.units[0].modules", "'root' must be the last unit"),
        ({"units": [["model.norm", "root"]]}, "setup.fsdp.units[0].modules[1]", "the root is not grouped"),
        (
            {"forward_prefetch": {"model.layers.0": ["model.layers.7"]}},
            "setup.fsdp.forward_prefetch",
            "no FSDP unit named 'model.layers.7'",
        ),
    ],
)
def test_a_unit_that_cannot_be_is_refused(fsdp, key, words):
    with pytest.raises(SetupError) as info:
        _setup(fsdp).unit_plan(2)
    assert info.value.key_path == key and words in info.value.message, str(info.value)


SPEC = """\
spec: units
title: t
document: d
setup:
  model: {body: causal_lm, overrides: {num_hidden_layers: 2}}
  fsdp:
    units:
      - model.layers.*
      - [model.norm, lm_head]
tables:
  - section: S
    check: collectives
    entries:
      - {select: {unit: UNIT}, count: 1}
"""


@pytest.mark.parametrize(
    "setup, key",
    [
        (
            {"fsdp": {"units": [{"modules": "model.layers.*", "shard_placement": {"model.layers.*.mlp.*": 1}}]}},
            "setup.fsdp.units[0].shard_placement",
        ),
        ({"fsdp": {"shard_placement": {"layers.*.mlp.*.weight": 1}}}, "setup.fsdp.shard_placement"),
        ({"freeze": {"params": ["model.layers.0.self_attn.q_proj"]}}, "setup.freeze.params[0]"),
        ({"grad_dtype": {"model.layers.*.weight": "float32"}}, "setup.grad_dtype.model.layers.*.weight"),
        (
            {"schedule": {"steps": [{}, {"freeze": ["model.layers.**"], "unfreeze": ["layers.0.**"]}]}},
            "setup.schedule.steps[1].unfreeze[0]",
        ),
        ({"schedule": {"steps": [{"freeze": ["model.layers.2.**"]}]}}, "setup.schedule.steps[0].freeze[0]"),
    ],
)
def test_a_parameter_pattern_that_names_nothing_is_refused(setup, key):
    from model.names import param_fqns

    run = RunSetup.from_mapping({"model": {"body": "causal_lm", "overrides": TINY}, **setup})
    with pytest.raises(SetupError) as info:
        run.unit_plan(2, param_fqns("causal_lm", 2))
    assert info.value.key_path == key and "matches no parameter" in info.value.message, str(info.value)


def test_selectors_name_the_units_of_the_setup(tmp_path: Path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace("UNIT", '"model.norm, lm_head"'), encoding="utf-8")
    assert len(load_spec(path).items) == 1
    path.write_text(SPEC.replace("UNIT", "lm_head"), encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "no FSDP unit named 'lm_head'" in str(info.value) and "'model.norm, lm_head'" in str(info.value)


def test_a_pattern_that_matches_nothing_is_a_load_error_at_its_line(tmp_path: Path):
    path = tmp_path / "spec.yaml"
    path.write_text(
        SPEC.replace("[model.norm, lm_head]", "[model.norm, lm_heads]").replace("UNIT", "root"), encoding="utf-8"
    )
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}:9: setup.fsdp.units[1].modules[1]: 'lm_heads' matches no module")


def test_meta_init_gives_the_full_inits_values_and_inv_freq(tmp_path: Path):
    """init_shards_like_full on a 1-rank world: every weight and RoPE's inv_freq equal a full init's."""
    import torch
    import torch.distributed as dist

    import model as qwen3
    from harness.run.rank.parallelize import apply_fsdp, build_mesh, init_shards_like_full, units_from_setup

    setup = RunSetup.from_mapping(
        {
            "model": {"body": "causal_lm", "overrides": dict(TINY, tie_word_embeddings=True), "dtype": "float32"},
            "mesh": {"shape": [1], "dim_names": ["dp"]},
            "init": "meta",
            "seed": 3,
        }
    )
    config = qwen3.get_config("walkthrough", **TINY, tie_word_embeddings=True)
    full = qwen3.init_weights(qwen3.Qwen3ForCausalLM(config), generator=torch.Generator().manual_seed(3))
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdv'}", rank=0, world_size=1)
    try:
        meta = qwen3.Qwen3ForCausalLM(config, device="meta")
        apply_fsdp(
            meta,
            build_mesh(setup, "cpu"),
            units_from_setup(setup, meta),
            materialize=lambda root: init_shards_like_full(root, torch.device("cpu"), seed=3),
        )
        got = {fqn: p.full_tensor() for fqn, p in meta.named_parameters()}
        assert list(got) == [fqn for fqn, _ in full.named_parameters()]
        for fqn, p in full.named_parameters():
            assert torch.equal(got[fqn], p), fqn
        assert meta.lm_head.weight is meta.model.embed_tokens.weight  # still tied
        assert torch.equal(meta.model.rotary_emb.inv_freq, full.model.rotary_emb.inv_freq)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    "setup_yaml, key, words",
    [
        ("  init: metal\n", "setup.init", "did you mean 'meta'? expected one of ['meta', 'full']"),
        ("  track_memory: maybe\n", "setup.track_memory", "is not of type 'boolean'"),
        ("  freeze: {params: []}\n", "setup.freeze.params", "should be non-empty"),
        (
            "  fsdp: {gradient_divide_factor: 0}\n",
            "setup.fsdp.gradient_divide_factor",
            "less than or equal to the minimum",
        ),
        ("  fsdp: {offload_policy: {pin: true}}\n", "setup.fsdp.offload_policy.pin", "'pin' was unexpected"),
        (
            "  fsdp: {units: [{modules: layers.*, reshard_after_backwards: false}]}\n",
            "setup.fsdp.units[0].reshard_after_backwards",
            "'reshard_after_backwards' was unexpected",
        ),
        (
            "  fsdp: {units: [{modules: layers.*, shard_placement: {'layers.*.mlp.*.weight': -1}}]}\n",
            "setup.fsdp.units[0].shard_placement.layers.*.mlp.*.weight",
            "less than the minimum of 0",
        ),
        (
            "  fsdp: {units: [{modules: layers.*, checkpoint_style: around}]}\n",
            "setup.fsdp.units[0].checkpoint_style",
            "expected one of ['composable', 'call', 'forward']",
        ),
        (
            "  fsdp: {units: [{modules: layers.*, checkpoint_style: call}]}\n",
            "setup.fsdp.units[0].checkpoint_style",
            "applies to a checkpointed unit; expected checkpoint: true beside it",
        ),
        (
            "  fsdp: {units: [{modules: layers.*, checkpoint: true, checkpoint_use_reentrant: true}]}\n",
            "setup.fsdp.units[0].checkpoint_use_reentrant",
            "torch.distributed._composable.checkpoint has no reentrant form; expected checkpoint_style call or forward",
        ),
        (
            "  fsdp: {checkpoint_use_reentrant: true, units: [{modules: layers.*, checkpoint: true}]}\n",
            "setup.fsdp.checkpoint_use_reentrant",
            "has no reentrant form",
        ),
        (
            "  fsdp: {checkpoint_style: forward, units: [layers.*]}\n",
            "setup.fsdp.checkpoint_style",
            "applies to a checkpointed unit",
        ),
        (
            "  fsdp: {units: [{modules: layers.0, unshard_in_backward: 0}]}\n",
            "setup.fsdp.units[0].unshard_in_backward",
            "is not of type 'boolean', 'null'",
        ),
        (
            "  fsdp: {reduce_scatter_unused_params: all}\n",
            "setup.fsdp.reduce_scatter_unused_params",
            "is not of type 'boolean', 'null'",
        ),
        (
            "  fsdp: {units: [{modules: layers.0, reduce_scatter_divide_factor: -2}]}\n",
            "setup.fsdp.units[0].reduce_scatter_divide_factor",
            "less than or equal to the minimum",
        ),
        (
            "  fsdp: {gradient_divide_factor: 2, units: [{modules: layers.*, reduce_scatter_divide_factor: 4}]}\n",
            "setup.fsdp.units[0].reduce_scatter_divide_factor",
            "expected one of gradient_divide_factor or reduce_scatter_divide_factor",
        ),
        (
            "  fsdp: {units: [{modules: layers.*, symm_mem_for_comm: nccl}]}\n",
            "setup.fsdp.units[0].symm_mem_for_comm",
            "expected one of ['NCCL', None]",
        ),
        (
            "  fsdp: {allocate_memory_from_process_group_for_comm: 1}\n",
            "setup.fsdp.allocate_memory_from_process_group_for_comm",
            "is not of type 'boolean', 'null'",
        ),
        (
            "  fsdp: {units: [layers.*, {modules: root, is_last_backward: last}]}\n",
            "setup.fsdp.units[1].is_last_backward",
            "is not of type 'boolean', 'null'",
        ),
        (
            "  fsdp: {checkpoint_use_reentrant: yes please}\n",
            "setup.fsdp.checkpoint_use_reentrant",
            "is not of type 'boolean'",
        ),
    ],
)
def test_bad_values_of_the_new_keys_are_load_errors_at_their_line(tmp_path: Path, setup_yaml, key, words):
    text = (
        "spec: s\ntitle: t\ndocument: d\nsetup:\n  model: {overrides: {num_hidden_layers: 2}}\n"
        + setup_yaml
        + "tables:\n  - section: S\n    check: collectives\n    entries:\n"
        + "      - {select: {op: all_gather}, count: 1}\n"
    )
    path = tmp_path / "spec.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}:6: {key}: "), str(info.value)
    assert words in str(info.value), str(info.value)


def test_a_checkpoint_form_at_fsdp_level_is_every_checkpointed_units_default():
    run = RunSetup.from_mapping(
        {
            "model": {"overrides": {"num_hidden_layers": 2}},
            "fsdp": {
                "checkpoint_style": "call",
                "checkpoint_use_reentrant": True,
                "units": [{"modules": "layers.0", "checkpoint": True}, "layers.1"],
            },
        }
    )
    plans = run.unit_plan(2)
    assert [(p.name, p.options.checkpoint, p.options.checkpoint_style) for p in plans] == [
        ("layers.0", True, "call"),
        ("layers.1", False, "call"),
        ("", False, "call"),
    ]


@pytest.mark.parametrize(
    "written, meant, body",
    [
        ("model.layers.1", "layers.1", "decoder_layers"),  # the causal_lm prefix on a bare stack of layers
        ("layer.1", "layers.1", "decoder_layers"),
        ("model.layers.1.attn", "model.layers.1.self_attn", "causal_lm"),
    ],
)
def test_a_module_that_matches_nothing_hints_the_one_meant_first(written, meant, body):
    """The hint once listed layers.1's children but not layers.1 itself."""
    with pytest.raises(SetupError) as info:
        _setup({"units": [written]}, body=body).unit_plan(2)
    message = info.value.message
    assert f"did you mean {meant!r}" in message, message
    assert message.index(repr(meant)) < message.index("modules like it")
    assert f"modules like it: [{meant!r}" in message, message
