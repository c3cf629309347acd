"""``harness.run.rank.forward_input``: the root gets ``x`` in the structure a schedule step names,
and the record says what arrived after FSDP2's pre-forward hook, on one real gloo rank with
``MixedPrecisionPolicy(param_dtype=bfloat16)``: cast in every structure but a ``UserDict``."""

from __future__ import annotations

from collections import UserDict

import pytest
import torch
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from harness.load.schedule import FORWARD_INPUTS
from harness.run.rank.forward_input import KEYWORD, ForwardBatch, call_root, pack


class _Echo(nn.Module):
    """A module whose forward takes one tensor, as the model's do."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def forward(self, x: torch.Tensor, skip_layers: tuple = ()) -> torch.Tensor:
        self.seen.append((x.dtype, skip_layers))
        return x * 2

    def doubled(self, x: torch.Tensor) -> torch.Tensor:
        """A method other than forward: no forward hook runs around it."""
        self.seen.append((x.dtype, "doubled"))
        return x * 2


def test_pack_builds_each_structure():
    x = torch.zeros(2, 3)
    assert pack(x, "positional") == ((x,), {})
    assert pack(x, "keyword") == ((), {KEYWORD: x})
    (batch,), _ = pack(x, "dataclass")
    assert isinstance(batch, ForwardBatch) and batch.inputs is x
    (held,), _ = pack(x, "user_dict")
    assert isinstance(held, UserDict) and held[KEYWORD] is x
    with pytest.raises(ValueError, match="unknown structure 'tuple'"):
        pack(x, "tuple")


@pytest.mark.parametrize("structure", FORWARD_INPUTS)
def test_the_model_gets_the_tensor_and_skip_layers_pass_through(structure):
    module, got = _Echo(), []
    out = call_root(module, torch.ones(2, 3), structure, got.append, skip_layers=(1,))
    assert module.seen == [(torch.float32, (1,))] and float(out.sum()) == 12.0
    assert [(g["argument"], g["shape"]) for g in got] == [
        ("keyword" if structure == "keyword" else "positional", [2, 3])
    ]
    assert not module._forward_pre_hooks, "the unpacking hook is removed after the call"


def test_a_forward_method_is_called_directly_and_records_nothing():
    module, got = _Echo(), []
    out = call_root(module, torch.ones(2, 3), "positional", got.append, method="doubled")
    assert module.seen == [(torch.float32, "doubled")] and float(out.sum()) == 12.0 and got == []


def test_fsdp_casts_every_structure_but_a_user_dict(one_rank):
    torch.manual_seed(0)
    root = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    fully_shard(root[0], mp_policy=policy)
    fully_shard(root, mp_policy=policy)
    seen = {}
    for structure in FORWARD_INPUTS:
        got = []
        call_root(root, torch.randn(3, 4), structure, got.append)
        seen[structure] = (got[0]["container"], got[0]["dtype"])
    assert seen == {
        "positional": ("Tensor", "bfloat16"),
        "keyword": ("Tensor", "bfloat16"),
        "dataclass": ("ForwardBatch", "bfloat16"),
        "dict": ("dict", "bfloat16"),
        "user_dict": ("UserDict", "float32"),  # _apply_to_tensors does not walk it
    }


def test_the_param_state_reader_finds_the_tensor_in_every_structure():
    """The root's pre-forward param state reads its input dtypes from what FSDP handed on."""
    from harness.run.rank.recorders.params import flat_tensors

    x = torch.zeros(2, dtype=torch.bfloat16)
    for structure in FORWARD_INPUTS:
        args, kwargs = pack(x, structure)
        assert [t.dtype for t in flat_tensors((args, kwargs))] == [torch.bfloat16], structure
