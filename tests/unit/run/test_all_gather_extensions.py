"""``harness.run.rank.recorders.all_gather_extensions`` on one real gloo rank: the recorder wraps a
tensor-subclass parameter's ``fsdp_pre_all_gather`` / ``fsdp_post_all_gather`` without changing
what FSDP sees (torch 2.13 checks the pre hook's signature), records each call, and takes the
wrappers off. The subclass is the shipped spec's (specs/all_gather_extension.py)."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

from harness.run.rank.recorders.all_gather_extensions import AllGatherExtensions

_SPEC_HOOKS = Path(__file__).resolve().parents[3] / "specs" / "all_gather_extension.py"


def _subclass():
    spec = importlib.util.spec_from_file_location("all_gather_extension_hooks", _SPEC_HOOKS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.BFloat16AllGather


def test_each_call_is_recorded_and_the_wrappers_come_off(one_rank):
    BFloat16AllGather = _subclass()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6, bias=False), nn.Linear(6, 4, bias=False))
    model[0].weight = nn.Parameter(BFloat16AllGather(model[0].weight.detach()))
    fully_shard(model)
    params = dict(model.named_parameters())
    local = params["0.weight"]._local_tensor
    before = inspect.signature(local.fsdp_pre_all_gather)
    recorder = AllGatherExtensions(params, lambda: (0, 0, "forward"))
    assert recorder.active
    assert inspect.signature(local.fsdp_pre_all_gather) == before  # FSDP counts its parameters
    model(torch.randn(3, 4)).sum().backward()
    calls = [(r["fqn"], r["call"], r["received_dtypes"], r["returned_dtypes"]) for r in recorder.records]
    assert calls[:2] == [
        ("0.weight", "pre", ["float32"], ["bfloat16"]),
        ("0.weight", "post", ["bfloat16"], ["float32"]),
    ]
    assert {r["fqn"] for r in recorder.records} == {"0.weight"}  # the plain parameter has no extension
    recorder.remove()
    assert "fsdp_pre_all_gather" not in local.__dict__ and recorder.active
    n = len(recorder.records)
    model(torch.randn(3, 4)).sum().backward()
    assert len(recorder.records) == n


def test_no_extension_no_record(one_rank):
    model = nn.Linear(4, 4)
    fully_shard(model)
    assert not AllGatherExtensions(dict(model.named_parameters()), lambda: (0, 0, "forward")).active
