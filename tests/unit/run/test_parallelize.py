"""The rank step's parts without launching ranks: FSDP units, the only fully_shard call, faults.

The runs themselves (and that splitting the step changed none of their observations) are
covered by tests/integration/test_launch.py, tests/unit/run/test_collectives_and_worlds.py and the shipped specs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch.distributed.fsdp import FSDPModule

import model as qwen3
from harness.load.setup import FSDPSetup, MixedPrecision, ModelSetup, RunSetup
from harness.load.units import UNIT_OPTION_KEYS, UnitOptions
from harness.run.rank.build import build_model
from harness.run.rank.loop import run_steps
from harness.run.rank.parallelize import UNIT_SETTERS, ShardUnit, _set_unit_options, units_from_setup
from harness.run.rank.recorders.phases import PHASE_HOOKS, Phases
from tests.support import REPO, faults

HARNESS = REPO / "harness"


def _calls(path: Path, name: str) -> list[int]:
    """Lines of ``path`` that call a function named ``name`` (plain or attribute call)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Name) and f.id == name) or (isinstance(f, ast.Attribute) and f.attr == name):
                lines.append(node.lineno)
    return lines


def test_apply_fsdp_is_the_only_caller_of_fully_shard():
    callers = {str(p.relative_to(HARNESS)): _calls(p, "fully_shard") for p in HARNESS.rglob("*.py")}
    callers = {p: lines for p, lines in callers.items() if lines}
    assert list(callers) == ["run/rank/parallelize.py"]
    assert len(callers["run/rank/parallelize.py"]) == 1


def test_shard_unit_passes_only_the_options_it_sets():
    assert ShardUnit("", "root").options() == {}
    assert ShardUnit("layers.0", "layer", 0, reshard_after_forward=False).options() == {"reshard_after_forward": False}
    assert ShardUnit("layers.0", "layer", 0, reshard_after_forward=2).options() == {"reshard_after_forward": 2}


# the options applied outside UNIT_SETTERS: fully_shard's arguments, checkpointing before it, compile after
_NOT_SETTERS = {
    "reshard_after_forward",
    "mp_policy",
    "offload_policy",
    "shard_placement",
    "ignored_params",
    "all_reduce_hook",  # these three name hooks-file functions: apply_fsdp's call_hook
    "custom_all_gather",
    "custom_reduce_scatter",
    "checkpoint",
    "checkpoint_style",
    "checkpoint_use_reentrant",
    "compile",
}


def test_every_unit_option_is_applied_in_exactly_one_place():
    assert set(UNIT_SETTERS) <= set(UNIT_OPTION_KEYS)
    assert sorted(set(UNIT_OPTION_KEYS) - set(UNIT_SETTERS)) == sorted(_NOT_SETTERS)


class _Recorder:
    """Stands in for an FSDPModule: records each setter called on it, with its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: self.calls.append((name, args, kwargs))


def test_a_setter_runs_only_when_its_option_differs_from_the_default():
    unset, module = ShardUnit("layers.0", "layer", 0, after=UnitOptions()), _Recorder()
    _set_unit_options([unset], [[module]])
    assert module.calls == []
    options = UnitOptions(gradient_divide_factor=2.0, reshard_after_backward=False)
    changed = ShardUnit("layers.0", "layer", 0, after=options)
    _set_unit_options([changed], [[module]])
    assert module.calls == [
        ("set_gradient_divide_factor", (2.0,), {}),
        ("set_reshard_after_backward", (False,), {"recurse": False}),
    ]


def test_reduce_scatter_divide_factor_is_torchs_deprecated_alias():
    """What specs/reduce_scatter_divide_factor_alias.yaml pins at run time, read from torch's API."""
    alias = FSDPModule.set_reduce_scatter_divide_factor
    assert getattr(alias, "__deprecated__", None) == "Use `set_gradient_divide_factor` instead"


@pytest.mark.parametrize("body, prefix", [("decoder_layers", "layers"), ("causal_lm", "model.layers")])
def test_units_from_setup_are_each_layer_then_the_root(body, prefix):
    setup = RunSetup(
        model=ModelSetup(body=body, overrides={"num_hidden_layers": 3}),
        fsdp=FSDPSetup(
            reshard_after_forward=2,
            root_reshard_after_forward=None,
            mixed_precision=MixedPrecision(param_dtype="bfloat16"),
        ),
    )
    config = qwen3.get_config(setup.model.config, **dict(setup.model.overrides))
    root = build_model(setup, config, torch.float32, torch.device("meta"), init=False)
    units = units_from_setup(setup, root)
    assert [(u.path, u.role, u.layer) for u in units] == [
        (f"{prefix}.0", "layer", 0),
        (f"{prefix}.1", "layer", 1),
        (f"{prefix}.2", "layer", 2),
        ("", "root", None),
    ]
    assert [u.options().get("reshard_after_forward") for u in units] == [2, 2, 2, None]
    assert {u.mp_policy.param_dtype for u in units} == {torch.bfloat16}


def test_an_empty_step_plan_is_refused():
    with pytest.raises(ValueError, match="step plan is empty"):
        run_steps([], None, None, None, Phases(), None)


def test_production_registers_no_phase_hook():
    assert PHASE_HOOKS == []


def test_a_fault_is_a_phase_hook_only_inside_its_block():
    fault = faults.Fault(rank=0, phase="forward")
    with faults.injected(fault):
        assert PHASE_HOOKS == [fault]
    assert PHASE_HOOKS == []


def test_a_fault_of_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match=r"fault kind 'explode': expected one of \('raise', 'hang', 'exit'\)"):
        faults.Fault(rank=0, kind="explode")


def test_phases_call_the_hooks_at_each_start():
    seen = []
    PHASE_HOOKS.append(seen.append)
    try:
        phases = Phases()
        with phases.phase("setup"):
            pass
        with phases.phase("forward"):
            assert phases.current == "forward"
    finally:
        PHASE_HOOKS.remove(seen.append)
    assert seen == ["setup", "forward"]


class _Counted(torch.nn.Module):
    """A linear layer counting its forward calls and the runs of a forward pre-hook (a stand-in for
    FSDP's: a module hook that a checkpoint around __call__ reruns, one around forward does not)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.forwards = self.hooks = 0
        self.register_forward_pre_hook(lambda module, args: setattr(module, "hooks", module.hooks + 1))

    def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
        self.forwards += 1
        return self.linear(x) * scale


@pytest.mark.parametrize(
    "style, reentrant, hooks",
    [("call", True, 2), ("call", False, 2), ("forward", True, 1), ("forward", False, 1)],
)
def test_the_functional_checkpoint_forms_recompute_inside_or_outside_the_module_hooks(style, reentrant, hooks):
    from harness.run.rank.parallelize import apply_checkpoint

    torch.manual_seed(0)
    plain, checkpointed = _Counted(), _Counted()
    checkpointed.load_state_dict(plain.state_dict())
    apply_checkpoint(checkpointed, style, reentrant)
    x = torch.randn(2, 4, requires_grad=True)  # a reentrant checkpoint needs an input that requires grad
    for m in (plain, checkpointed):
        m(x, scale=2.0).square().sum().backward()  # a keyword argument passes through the checkpoint
    assert (checkpointed.forwards, checkpointed.hooks) == (2, hooks)  # forward recomputed in backward
    assert isinstance(checkpointed, _Counted)
    for a, b in zip(plain.parameters(), checkpointed.parameters()):
        assert torch.equal(a.grad, b.grad)
    with torch.no_grad():  # no grad: no checkpoint, no recomputation
        checkpointed(x)
    assert checkpointed.forwards == 3


def test_an_unknown_checkpoint_style_is_refused():
    from harness.run.rank.parallelize import apply_checkpoint

    with pytest.raises(ValueError, match="checkpoint_style 'around'"):
        apply_checkpoint(_Counted(), "around", False)


def test_grad_dtypes_and_step_freezes_act_on_the_matching_parameters():
    """setup.grad_dtype: the first matching pattern sets Parameter.grad_dtype, and autograd then keeps a
    bf16 parameter's gradient in float32 (what fully_shard drops, specs/grad_dtype_dropped.yaml); a
    schedule step's freeze then unfreeze set requires_grad; a pattern naming nothing is refused."""
    from harness.load.schedule import ScheduleStep
    from harness.run.rank.parallelize import set_grad_dtypes, step_requires_grad

    layer = torch.nn.Sequential(
        torch.nn.Linear(4, 4, dtype=torch.bfloat16), torch.nn.Linear(4, 2, dtype=torch.bfloat16)
    )
    chosen = set_grad_dtypes(layer, [("0.*", "float32"), ("*.weight", "float16")])
    assert chosen == {"0.weight": "float32", "0.bias": "float32", "1.weight": "float16"}
    layer(torch.ones(3, 4, dtype=torch.bfloat16)).float().sum().backward()
    assert [p.grad.dtype for p in layer.parameters()] == [torch.float32, torch.float32, torch.float16, torch.bfloat16]
    with pytest.raises(ValueError, match="setup.grad_dtype: '2.\\*' matches no parameter"):
        set_grad_dtypes(layer, [("2.*", "float32")])
    step_requires_grad(layer, ScheduleStep(freeze=("**",), unfreeze=("1.bias",)))
    assert [p.requires_grad for p in layer.parameters()] == [False, False, False, True]
    with pytest.raises(ValueError, match="unfreeze: '3.bias' matches no parameter"):
        step_requires_grad(layer, ScheduleStep(unfreeze=("3.bias",)))


@pytest.mark.parametrize("materializer", ["init_local_shards", "init_shards_like_full"])
def test_a_meta_built_uneven_shard_is_padded_when_materialized(materializer, tmp_path):
    """The last of 3 ranks holds fewer rows of the walkthrough layer's matrices: each shard's
    storage must be FSDP's padded one once materialized, as after a recursive ``to_empty``, not
    left for the first forward's lazy init to re-pad (which the memory tracker then counted as
    activations, and no sharded parameter, on that rank alone)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from harness.run.rank import parallelize

    setup = RunSetup.from_mapping(
        {
            "model": {"config": "walkthrough", "overrides": {"num_hidden_layers": 1}, "body": "decoder_layers"},
            "mesh": {"shape": [3], "dim_names": ["dp"]},
            "init": "meta",
        }
    )
    config = qwen3.get_config("walkthrough", num_hidden_layers=1)
    root = qwen3.Qwen3DecoderStack(config, device=torch.device("meta"), dtype=torch.float32)
    materialize = {
        "init_local_shards": lambda r: parallelize.init_local_shards(r, torch.device("cpu"), std=0.02, seed=0, rank=2),
        "init_shards_like_full": lambda r: parallelize.init_shards_like_full(r, torch.device("cpu"), seed=0),
    }[materializer]
    dist.init_process_group("fake", store=FakeStore(), rank=2, world_size=3)  # rank 2: the short shard
    try:
        parallelize.apply_fsdp(
            root, parallelize.build_mesh(setup, "cpu"), units_from_setup(setup, root), materialize=materialize
        )
        fsdp_params = [p for m in root.modules() for g in _param_groups(m) for p in g.fsdp_params]
        assert len(fsdp_params) == 11  # every parameter of the layer
        short = 0
        for fp in fsdp_params:
            local = fp.sharded_param.to_local()
            padded = fp.padded_sharded_param_size
            short += local.shape[0] < padded[0]
            storage_elements = local.untyped_storage().nbytes() // local.element_size()
            assert storage_elements == padded.numel(), fp._param_fqn or fp._module_info.param_name
        assert short == 11  # every one is uneven on rank 2: the test reads the case it means
    finally:
        dist.destroy_process_group()


def _param_groups(module: torch.nn.Module) -> list:
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(module, FSDPModule):
        return []
    return list(module._get_fsdp_state()._fsdp_param_groups)
