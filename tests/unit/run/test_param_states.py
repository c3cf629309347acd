"""The run side of issue 23's observability vocabulary without launching ranks: the fully_shard
call record keeps only what each call changed, the NaN fill of uninitialized memory is torch's
own switch and is restored, an init without repairs leaves RMSNorm and inv_freq alone, and the
pinned/finite probes on meta, CPU and fake tensors. Real FSDP runs: the shipped specs."""

from __future__ import annotations

import pytest
import torch
import torch.utils.deterministic as deterministic
from torch import nn

import model as qwen3
from harness.run.rank.parallelize import uninitialized_memory_as_nan
from harness.run.rank.recorders.param_states import FullyShardCalls, ParamStateHooks
from harness.run.rank.recorders.params import finite, pinned


def test_each_call_keeps_only_the_parameters_it_changed():
    root = nn.Sequential(nn.Linear(2, 4, bias=False), nn.Linear(4, 2, bias=False))
    calls = FullyShardCalls()
    calls.before(root)
    root[0].weight = nn.Parameter(torch.zeros(2, 2))  # what a call does: register another tensor, other shape
    calls.after("0", root)
    calls.after("", root)  # a call that changed nothing
    assert [r["fqn"] for r in calls.record["before"]] == ["0.weight", "1.weight"]
    assert calls.record["before"][0] == {
        "fqn": "0.weight",
        "is_dtensor": False,
        "shape": [4, 2],
        "full_shape": [4, 2],
        "placements": [],
        "device": "cpu",
        "dtype": "float32",
    }
    assert [(c["unit"], [r["fqn"] for r in c["changed"]]) for c in calls.record["calls"]] == [
        ("0", ["0.weight"]),
        ("", []),
    ]
    assert calls.record["calls"][0]["changed"][0]["shape"] == [2, 2]


def test_a_simulated_rank_records_the_device_it_stands_for():
    root = nn.Linear(2, 2, bias=False, device="meta")
    calls = FullyShardCalls()
    calls.before(root, device="cuda")
    assert calls.record["before"][0]["device"] == "cuda"


def test_uninitialized_memory_is_nan_inside_and_the_switches_come_back():
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        deterministic.fill_uninitialized_memory,
    )
    with uninitialized_memory_as_nan():
        assert torch.isnan(torch.empty(16)).all()
        module = nn.Linear(3, 2, device="meta").to_empty(device="cpu")
        assert torch.isnan(module.weight).all()
    after = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        deterministic.fill_uninitialized_memory,
    )
    assert after == before


def test_an_init_without_repairs_leaves_norms_and_inv_freq_as_they_are():
    config = qwen3.get_config(
        "walkthrough",
        num_hidden_layers=1,
        hidden_size=64,
        head_dim=16,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
    )
    with uninitialized_memory_as_nan():
        stack = qwen3.Qwen3DecoderStack(config, device=torch.device("meta")).to_empty(device="cpu")
    qwen3.init_weights(stack, generator=torch.Generator().manual_seed(0), reset_norms_and_rope=False)
    assert torch.isnan(stack.layers[0].input_layernorm.weight).all()
    assert torch.isnan(stack.rotary_emb.inv_freq).all()
    assert torch.isfinite(stack.layers[0].self_attn.q_proj.weight).all()
    qwen3.init_weights(stack, generator=torch.Generator().manual_seed(0))  # the repairs
    assert (stack.layers[0].input_layernorm.weight == 1).all() and torch.isfinite(stack.rotary_emb.inv_freq).all()


def test_pinned_and_finite_on_cpu_meta_and_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert pinned(torch.zeros(2)) is False and finite(torch.zeros(2)) is True
    assert finite(torch.tensor([1.0, float("inf")])) is False
    assert pinned(torch.zeros(2, device="meta")) is None and finite(torch.zeros(2, device="meta")) is None
    with FakeTensorMode():
        fake = torch.zeros(2)
    assert pinned(fake) is None and finite(fake) is None


def test_the_loop_takes_only_its_own_points():
    hooks = ParamStateHooks([])
    with pytest.raises(ValueError, match="expected one of \\['after_backward', 'after_optimizer_step'"):
        hooks.snapshot_all("pre_forward")
