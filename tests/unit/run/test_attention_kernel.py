"""``setup.model.attention_kernel``: the SDPA backend the rank's steps run under (harness/run/rank/build.py)."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

from harness.load.setup import ATTENTION_KERNELS
from harness.run.rank.build import attention_kernel


def _attend() -> torch.Tensor:
    q = torch.randn(1, 2, 4, 8)
    return F.scaled_dot_product_attention(q, q, q, is_causal=True)


def test_every_declared_kernel_is_an_sdp_backend():
    for name in ATTENTION_KERNELS:
        with attention_kernel(name):
            pass
    assert isinstance(attention_kernel(None), contextlib.nullcontext)


def test_the_kernel_reaches_torch():
    """On CPU the math kernel runs and the memory-efficient one has no CPU kernel: torch refuses the call."""
    with attention_kernel("math"):
        assert _attend().shape == (1, 2, 4, 8)
    with attention_kernel("efficient_attention"):
        with pytest.raises(RuntimeError, match="No viable backend for scaled_dot_product_attention"):
            _attend()
