"""Hints name the valid value the author most likely meant, before any list of valid values."""

from __future__ import annotations

import pytest

from harness.language.suggest import closest, closest_first, did_you_mean

MODULES = ["layers", "layers.0", "layers.0.self_attn", "layers.0.mlp", "layers.1", "layers.1.self_attn", "layers.1.mlp"]


@pytest.mark.parametrize(
    "value, first",
    [
        ("model.layers.1", "layers.1"),  # a prefix too many: the name itself, and only it
        ("layers.1.self_atn", "layers.1.self_attn"),  # a spelling slip
        ("Layers.1", "layers.1"),  # case
    ],
)
def test_the_name_meant_comes_first(value, first):
    assert closest(value, MODULES)[0] == first
    assert closest_first(value, MODULES)[0] == first
    assert did_you_mean(value, MODULES).startswith(f"did you mean {first!r}")


def test_a_prefix_too_many_suggests_nothing_else():
    assert closest("model.layers.1", MODULES) == ["layers.1"]


def test_nothing_close_says_nothing():
    assert closest("embed_tokens", MODULES) == [] and did_you_mean("embed_tokens", MODULES) == ""
    assert closest_first("embed_tokens", MODULES) == MODULES
    assert closest(3, MODULES) == []  # not a name at all
