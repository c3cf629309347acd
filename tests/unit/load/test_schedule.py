"""The schedule without launching ranks: its setup keys and their load errors, the step plan and
the single-process reference. Its check kinds (events, param_update, grad_norm, the
step_index/microbatch selectors): tests/unit/language/kinds/test_schedule_kinds.py.

The real runs are the shipped specs (specs/grad_accumulation.yaml, event_order.yaml, ...)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

import model as qwen3
from harness.load.setup import RunSetup
from harness.load.spec import SpecError, load_spec
from harness.run.rank.build import build_model, make_inputs
from harness.run.rank.recorders.updates import schedule_reference, shard_rows
from harness.run.rank.step_plan import global_batches, loss_function, step_plan
from tests.support.specs import TINY_DIMS

SPEC = """\
spec: sched
title: a schedule
document: a document
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 2}, body: BODY}
  mesh: MESH
  schedule:
    SCHEDULE
tables:
  - section: "S"
    check: CHECK
    entries:
      - ENTRY
"""


def write(
    tmp_path: Path,
    schedule: str,
    check: str = "collectives",
    entry: str = "{select: {op: all_gather}, count: 4}",
    body: str = "decoder_layers",
    mesh: str = "{shape: [2], dim_names: [dp]}",
) -> Path:
    path = tmp_path / "spec.yaml"
    text = SPEC.replace("SCHEDULE", schedule).replace("CHECK", check).replace("ENTRY", entry).replace("BODY", body)
    path.write_text(text.replace("MESH", mesh), encoding="utf-8")
    return path


# --- loading --------------------------------------------------------------------------------


def test_a_schedule_loads_with_every_key(tmp_path):
    schedule = (
        "steps: [{microbatches: 2, gradient_sync: every, forwards: 2, used_only_in: {layers.1.mlp: [1]}, "
        "clip_grad_norm: {max_norm: 1.0, norm_type: 2}, optimizer_step: false, zero_grad: zeros, "
        "unshard: [layers.0], reshard: [root], repeat: 3}, {no_grad: true, freeze: ['layers.0.**']}, "
        "{loss_on: 'layers.1:step9.gate', unfreeze: ['layers.0.mlp.*.weight'], freeze: ['layers.1.**']}]\n"
        "    loss: sum"
    )
    spec = load_spec(write(tmp_path, schedule))
    s = spec.setup.schedule
    assert s.loss == "sum" and s.microbatches() == (2, 2, 2, 1, 1)
    assert s.steps[0].used_only_in == {"layers.1.mlp": (1,)} and s.steps[0].unshard == ("layers.0",)
    assert s.steps[1].no_grad and not s.steps[1].backward and s.steps[2].loss_target() == ("layers.1", "step9.gate")
    assert spec.setup.to_dict()["schedule"]["steps"][0]["clip_grad_norm"] == {"max_norm": 1.0, "norm_type": 2}
    assert s.steps[0].freeze == () and s.steps[1].freeze == ("layers.0.**",)
    assert s.steps[2].unfreeze == ("layers.0.mlp.*.weight",) and s.steps[2].freeze == ("layers.1.**",)


def test_the_gradient_penalty_needs_hidden_states_for_inputs(tmp_path):
    path = write(tmp_path, "steps: [{}]\n    loss: input_grad_penalty", body="causal_lm")
    with pytest.raises(SpecError, match=r"setup.schedule.loss: input_grad_penalty differentiates the hidden states"):
        load_spec(path)


def test_abort_and_async_unshard_load(tmp_path):
    spec = load_spec(write(tmp_path, "steps: [{abort_backward_at: root}, {unshard: [layers.1], unshard_async: true}]"))
    first, second = spec.setup.schedule.steps
    assert first.abort_backward_at == "root" and second.unshard_async and not first.unshard_async
    # numerics off: nothing to compare with a reference, an aborted step may come last
    text = (
        write(tmp_path, "steps: [{abort_backward_at: layers.0}]")
        .read_text()
        .replace("  mesh:", "  numerics: false\n  mesh:")
    )
    (tmp_path / "spec.yaml").write_text(text)
    assert load_spec(tmp_path / "spec.yaml").setup.schedule.steps[0].abort_backward_at == "layers.0"


# (schedule, key path blamed, words of the message)
BAD = [
    (
        "steps: [{loss_on: 'layers.1.step9.gate'}]",
        "setup.schedule.steps[0].loss_on",
        "'<decoder layer path>:<step name>'",
    ),
    ("steps: [{loss_on: 'layers.1:step9.gates'}]", "setup.schedule.steps[0].loss_on", "steps: ['step1.x_norm'"),
    ("steps: [{loss_on: 'layers.2:step9.gate'}]", "setup.schedule.steps[0].loss_on", "no decoder layer 'layers.2'"),
    (
        "steps: [{microbatches: 2, used_only_in: {layers.1: [2]}}]",
        "setup.schedule.steps[0].used_only_in.layers.1",
        "microbatch(es) [2] do not exist: the step has 2 microbatches (0-1)",
    ),
    (
        "steps: [{used_only_in: {layers.1.attn: [0]}}]",
        "setup.schedule.steps[0].used_only_in.layers.1.attn",
        "no decoder layer or block 'layers.1.attn'",
    ),
    (
        "steps: [{unshard: [layers.3]}]",
        "setup.schedule.steps[0].unshard[0]",
        "no FSDP unit 'layers.3'; units: ['layers.0', 'layers.1', 'root']",
    ),
    ("steps: [{}]\n    loss: cross_entropy", "setup.schedule.loss", "cross_entropy needs the causal LM's logits"),
    (
        "steps: [{no_grad: true, forward_only: false}]",
        "setup.schedule.steps[0].forward_only",
        "no_grad: true runs no backward",
    ),
    (
        "steps: [{no_grad: true, clip_grad_norm: {max_norm: 1}}]",
        "setup.schedule.steps[0].clip_grad_norm",
        "no gradients to clip",
    ),
    ("steps: [{loss_scale: 0}]", "setup.schedule.steps[0].loss_scale", "less than or equal to the minimum of 0"),
    ("steps: [{loss_scale: big}]", "setup.schedule.steps[0].loss_scale", "is not of type 'number'"),
    (
        "steps: [{forward_only: true, loss_scale: 1.0e-30}]",
        "setup.schedule.steps[0].loss_scale",
        "a forward-only step runs no backward to scale",
    ),
    ("steps: [{microbatches: 0}]", "setup.schedule.steps[0].microbatches", "0 is less than the minimum of 1"),
    ("steps: [{gradient_sync: first}]", "setup.schedule.steps[0].gradient_sync", "expected one of ['last', 'every']"),
    ("steps: [{zero_grad: maybe}]", "setup.schedule.steps[0].zero_grad", "expected one of [True, False, 'zeros']"),
    ("steps: [{microbatch: 2}]", "setup.schedule.steps[0].microbatch", "'microbatch' was unexpected"),
    (
        "steps: [{freeze: ['layers.0.**', 'layers.1.mlp.*'], unfreeze: ['layers.0.**']}]",
        "setup.schedule.steps[0].unfreeze",
        "pattern(s) ['layers.0.**'] are in freeze too",
    ),
    (
        "steps: [{}, {unfreeze: ['layers.2.**']}]",
        "setup.schedule.steps[1].unfreeze[0]",
        "'layers.2.**' matches no parameter; parameters look like ['layers.0.self_attn.q_proj.weight'",
    ),
    ("steps: [{freeze: 'layers.0.**'}]", "setup.schedule.steps[0].freeze", "is not of type 'array'"),
    ("steps: [{unshard_async: true}]", "setup.schedule.steps[0].unshard_async", "names no unit to unshard"),
    (
        "steps: [{}, {forward_only: true}]\n    loss: input_grad_penalty",
        "setup.schedule.steps[1].forward_only",
        "input_grad_penalty takes a gradient in the forward's loss: expected a step with a backward",
    ),
    ("steps: [{abort_backward_at: layers.3}, {}]", "setup.schedule.steps[0].abort_backward_at", "no FSDP unit"),
    (
        "steps: [{forward_only: true, abort_backward_at: layers.0}, {}]",
        "setup.schedule.steps[0].abort_backward_at",
        "a forward-only step runs no backward to abort",
    ),
    (
        "steps: [{microbatches: 2, abort_backward_at: layers.0}, {}]",
        "setup.schedule.steps[0].abort_backward_at",
        "expected a step of 1 microbatch, got 2",
    ),
    (
        "steps: [{abort_backward_at: layers.0, clip_grad_norm: {max_norm: 1}}, {}]",
        "setup.schedule.steps[0].clip_grad_norm",
        "an aborted step clips nothing",
    ),
    # with numerics on, the reference skips an aborted step: what it left must be cleared after it
    (
        "steps: [{}, {abort_backward_at: layers.0}]",
        "setup.schedule.steps[1].abort_backward_at",
        "an aborted step cannot be the last: expected a step after it that clears the gradients it left",
    ),
    (
        "steps: [{abort_backward_at: root, repeat: 2}, {zero_grad: false}]",
        "setup.schedule.steps[1].zero_grad",
        "keeps its partly reduced gradients",
    ),
]


@pytest.mark.parametrize(
    "schedule, key_path, words", BAD, ids=[b[1].rsplit(".", 1)[-1] + str(i) for i, b in enumerate(BAD)]
)
def test_a_bad_schedule_is_a_load_error_naming_the_key(tmp_path, schedule, key_path, words):
    path = write(tmp_path, schedule)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert len(info.value.errors) == 1, str(info.value)
    line, key, message = info.value.errors[0]
    assert key == key_path and words in message, str(info.value)
    assert str(info.value).startswith(f"{path}:{line}: {key_path}: ") and line >= 7


HSDP = "{shape: [2, 2], dim_names: [dp_replicate, dp_shard]}"

# (schedule, mesh, key path blamed, words): all_reduce: last defers HSDP's all-reduce only
BAD_ALL_REDUCE = [
    (
        "steps: [{microbatches: 2, gradient_sync: every, all_reduce: last}]",
        "{shape: [4], dim_names: [dp]}",
        "setup.schedule.steps[0].all_reduce",
        "mesh shape [4] has no replicate dim: expected a 2-D mesh",
    ),
    (
        "steps: [{microbatches: 2, all_reduce: last}]",
        HSDP,
        "setup.schedule.steps[0].all_reduce",
        "needs gradient_sync: every (gradient_sync: last already turns off",
    ),
    (
        "steps: [{}, {gradient_sync: every, all_reduce: last}]",
        HSDP,
        "setup.schedule.steps[1].all_reduce",
        "expected microbatches >= 2, got 1",
    ),
    (
        "steps: [{microbatches: 2, gradient_sync: every, all_reduce: last, forward_only: true}]",
        HSDP,
        "setup.schedule.steps[0].all_reduce",
        "a forward-only step reduces nothing",
    ),
    ("steps: [{all_reduce: first}]", HSDP, "setup.schedule.steps[0].all_reduce", "expected one of ['every', 'last']"),
]


@pytest.mark.parametrize("schedule, mesh, key_path, words", BAD_ALL_REDUCE, ids=range(len(BAD_ALL_REDUCE)))
def test_all_reduce_last_is_refused_where_there_is_no_all_reduce_to_defer(tmp_path, schedule, mesh, key_path, words):
    path = write(tmp_path, schedule, mesh=mesh)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert len(info.value.errors) == 1, str(info.value)
    line, key, message = info.value.errors[0]
    assert key == key_path and words in message, str(info.value)
    assert str(info.value).startswith(f"{path}:{line}: {key_path}: ") and line >= 7


def test_all_reduce_last_loads_on_an_hsdp_mesh(tmp_path):
    spec = load_spec(
        write(tmp_path, "steps: [{microbatches: 3, gradient_sync: every, all_reduce: last}, {}]", mesh=HSDP)
    )
    assert [s.all_reduce for s in spec.setup.schedule.steps] == ["last", "every"]


# (check kind, entry, key path blamed, words): selectors that no step or microbatch of the schedule has
BAD_SELECTORS = [
    (
        "collectives",
        "{select: {step_index: 3}, count: 0}",
        "tables[0].entries[0].select",
        "step_index: step(s) [3] do not exist: the schedule runs 3 steps (0-2)",
    ),
    (
        "collectives",
        "{select: {microbatch: 2}, count: 0}",
        "tables[0].entries[0].select",
        "microbatch: microbatch(es) [2] do not exist: no step of the schedule has more than 2 microbatches (0-1)",
    ),
    (
        "memory",
        "{layer: 0, state: After Pre-Forward, step_index: -1, total: 0}",
        "tables[0].entries[0].step_index",
        "expected a step index >= 0",
    ),
    ("step", "{step: step1.x_norm, microbatch: 5, layers: 2}", "tables[0].entries[0].microbatch", "do not exist"),
    ("events", "{events: [reshard layers.9], count: 0}", "tables[0].entries[0].events", "no FSDP unit 'layers.9'"),
    ("events", "{events: ['unshrd *'], count: 0}", "tables[0].entries[0].events", "no event 'unshrd'"),
    ("events", "{phase: forwards, count: 0}", "tables[0].entries[0].phase", "phase 'forwards' cannot occur"),
    ("param_update", "{param: mlp.up_proj.weight, rows: 1}", "tables[0].entries[0]", "names its 'layer' too"),
    ("param_update", "{fqn: layers.0.mlp.up.weight, rows: 1}", "tables[0].entries[0].fqn", "has no parameter"),
    ("grad_norm", "{step_index: 7, value: 1.0}", "tables[0].entries[0].step_index", "do not exist"),
    ("grad_norm", "{placements: Replicate()}", "tables[0].entries[0]", "placements: expected a list of strings"),
    ("grads", "{param: mlp.up_proj.weight, with_grad: 1}", "tables[0].entries[0]", "names its 'layer' too"),
    ("grads", "{step_index: 3, with_grad: 1}", "tables[0].entries[0].step_index", "do not exist"),
    ("grads", "{grad_dtype: fp32}", "tables[0].entries[0]", "grad_dtype: expected a dtype name"),
    ("unit_dtypes", "{layer: 2, orig_dtype: null}", "tables[0].entries[0].layer", "layer(s) [2] do not exist"),
    ("unit_dtypes", "{microbatch: 2, reduce_dtype: null}", "tables[0].entries[0].microbatch", "do not exist"),
]


@pytest.mark.parametrize(
    "check_kind, entry, key_path, words", BAD_SELECTORS, ids=[f"{b[0]}{i}" for i, b in enumerate(BAD_SELECTORS)]
)
def test_selectors_refuse_steps_the_schedule_does_not_run(tmp_path, check_kind, entry, key_path, words):
    path = write(tmp_path, "steps: [{microbatches: 2, repeat: 2}, {}]", check_kind, entry)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert len(info.value.errors) == 1, str(info.value)
    _, key, message = info.value.errors[0]
    assert key == key_path and words in message, str(info.value)


# --- the plan and the reference -------------------------------------------------------------


def tiny_setup(schedule: dict, body: str = "decoder_layers", **kwargs) -> RunSetup:
    return RunSetup.from_mapping(
        {
            "model": {"config": "walkthrough", "overrides": TINY_DIMS, "body": body, "dtype": "float32"},
            "mesh": {"shape": [2]},
            "schedule": schedule,
            **kwargs,
        }
    )


def tiny_reference(schedule: dict, loss: str, batches_n: int, shard_index: int):
    """(model, global batches, the schedule's reference on 2 chunks with SGD lr 0.5) of the tiny layers."""
    setup = tiny_setup(schedule)
    config = qwen3.get_config("walkthrough", **TINY_DIMS)
    model = build_model(setup, config, torch.float32, torch.device("cpu"), init=True)
    batches = global_batches(setup, config, torch.float32, batches_n)
    plan = step_plan(setup, batches[0][:2], lambda n: [b[:2] for b in batches[:n]])
    ref = schedule_reference(
        model,
        plan,
        batches,
        loss_fn=loss_function(loss),
        make_optimizer=lambda ps: torch.optim.SGD(ps, lr=0.5),
        world_size=2,
        rank=0,
        shard_count=2,
        shard_index=shard_index,
        compute_dtype=torch.float32,
        reduce_dtype=torch.float32,
    )
    return model, batches, ref


def test_the_plan_expands_repeats_microbatches_and_forwards():
    setup = tiny_setup(
        {
            "steps": [
                {"microbatches": 3, "used_only_in": {"layers.1": [2], "layers.0.mlp": [0]}},
                {"forwards": 2, "repeat": 2},
                {"microbatches": 2, "gradient_sync": "every"},
            ]
        }
    )
    config = qwen3.get_config("walkthrough", **TINY_DIMS)
    batches = global_batches(setup, config, torch.float32, 3 + 4 + 2)
    plan = step_plan(setup, batches[0][:2], lambda n: [b[:2] for b in batches[:n]])
    assert [s.index for s in plan] == [0, 1, 2, 3]
    assert [[[f.index for f in mb.forwards] for mb in s.microbatches] for s in plan] == [
        [[0], [1], [2]],
        [[3, 4]],
        [[5, 6]],
        [[7], [8]],
    ]
    assert [mb.sync for mb in plan[0].microbatches] == [False, False, True]
    assert [mb.sync for mb in plan[3].microbatches] == [None, None]  # sync on every microbatch: never switched
    assert [mb.skip_layers for mb in plan[0].microbatches] == [(1,), ((0, "mlp"), 1), ((0, "mlp"),)]
    assert torch.equal(plan[1].microbatches[0].forwards[1].inputs, batches[4][:2])
    assert {mb.all_reduce for s in plan for mb in s.microbatches} == {None}  # FSDP2's default: never switched


def test_all_reduce_last_switches_the_all_reduce_off_on_all_microbatches_but_the_last():
    steps = [{"microbatches": 3, "gradient_sync": "every", "all_reduce": "last"}, {"microbatches": 2}]
    setup = tiny_setup({"steps": steps}, mesh={"shape": [2, 2], "dim_names": ["dp_replicate", "dp_shard"]})
    config = qwen3.get_config("walkthrough", **TINY_DIMS)
    batches = global_batches(setup, config, torch.float32, 5)
    plan = step_plan(setup, batches[0][:2], lambda n: [b[:2] for b in batches[:n]])
    assert [(mb.sync, mb.all_reduce) for mb in plan[0].microbatches] == [(None, False), (None, False), (None, True)]
    assert [(mb.sync, mb.all_reduce) for mb in plan[1].microbatches] == [(False, None), (True, None)]


def test_forward_0_sees_the_default_runs_inputs():
    setup = tiny_setup({"steps": [{"microbatches": 2}]})
    config = qwen3.get_config("walkthrough", **TINY_DIMS)
    inputs = make_inputs(setup, config, 1, 2, torch.float32, torch.device("cpu"), local_only=False)
    assert torch.equal(global_batches(setup, config, torch.float32, 2)[0][2:4], inputs.tensor)


@pytest.mark.parametrize("name, expected", [("mean_square", 14 / 4), ("sum", 6.0)])
def test_loss_functions(name, expected):
    assert float(loss_function(name)(torch.tensor([[1.0, 2.0], [3.0, 0.0]]), None)) == expected
    with pytest.raises(ValueError, match="expected one of mean_square, sum, input_grad_penalty, cross_entropy"):
        loss_function("l2")


def test_the_gradient_penalty_differentiates_the_inputs_twice():
    """out = 3x: mean(out^2) = 9 mean(x^2); its gradient 18x / n; the penalty adds 324 sum(x^2) / n^2."""
    from harness.run.rank.step_plan import forward_inputs

    penalty = loss_function("input_grad_penalty")
    x = forward_inputs(torch.tensor([[1.0, 2.0], [3.0, 0.0]]), penalty)
    assert x.requires_grad and not forward_inputs(x, loss_function("sum")).grad_fn
    loss = penalty(3 * x, x)
    assert float(loss.detach()) == pytest.approx(9 * 14 / 4 + 324 * 14 / 16)
    loss.backward()  # the second differentiation: d/dx [9 x^2 / 4 + 324 x^2 / 16] summed
    assert torch.allclose(x.grad, (18 / 4 + 648 / 16) * x.detach())


def test_the_reference_is_one_sgd_step_on_the_mean_gradient():
    """Two chunks, two microbatches with sync off on the first: the reference's step is
    w - lr x (mean over chunks and microbatches of the gradients), as one process computes it."""
    model, batches, ref = tiny_reference({"steps": [{"microbatches": 2}]}, "mean_square", 2, shard_index=1)
    loss_fn = loss_function("mean_square")
    plain = copy.deepcopy(model)
    sum(loss_fn(plain(b[c * 2 : (c + 1) * 2]), None) for b in batches for c in range(2)).div(4).backward()
    for fqn, p in plain.named_parameters():
        expected = shard_rows((p - 0.5 * p.grad).detach(), 2, 1)
        torch.testing.assert_close(ref.rows_after[0][fqn], expected, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(ref.grad_rows[fqn], shard_rows(p.grad, 2, 1), rtol=1e-5, atol=1e-7)
    assert all(p.grad is None for p in model.parameters())  # the model itself is left as it was


def test_without_fully_shard_the_gradient_penalty_step_finishes():
    """The other half of specs/double_backward_segfault.yaml: the same layers and loss in one process,
    as the schedule's reference runs them, differentiate twice and give finite gradients."""
    from harness.run.rank.build import attention_kernel

    with attention_kernel("math"):
        model, _, ref = tiny_reference({"loss": "input_grad_penalty", "steps": [{}]}, "input_grad_penalty", 1, 0)
    grads = [g for g in ref.grad_rows.values() if g is not None]
    assert len(grads) == len(list(model.parameters())) and all(torch.isfinite(g).all() for g in grads)


def test_the_reference_freezes_and_unfreezes_as_the_steps_say():
    """Step 0 freezes layers.0 (its rows stay, layers.1's move), step 1 unfreezes it (its rows move):
    the reference applies each step's freeze / unfreeze to its own copy, the model is left as it was."""
    model, _, ref = tiny_reference(
        {"steps": [{"freeze": ["layers.0.**"]}, {"unfreeze": ["layers.0.**"]}]}, "mean_square", 2, shard_index=0
    )
    q0, q1 = "layers.0.self_attn.q_proj.weight", "layers.1.self_attn.q_proj.weight"
    assert torch.equal(ref.rows_after[0][q0], ref.rows_before[q0])
    assert not torch.equal(ref.rows_after[0][q1], ref.rows_before[q1])
    assert not torch.equal(ref.rows_after[1][q0], ref.rows_after[0][q0])
    assert ref.grad_rows[q0] is not None
    assert all(p.requires_grad for p in model.parameters())
