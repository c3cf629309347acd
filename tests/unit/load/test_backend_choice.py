"""A spec pinned to a backend keeps it under --backend / --fsdp2-backend unless forced
(harness/load/backend_choice.py)."""

from __future__ import annotations

import pytest

from harness.contract.names import BACKENDS
from harness.load.backend_choice import chosen_backend, kept_backend_note


@pytest.mark.parametrize("requested", BACKENDS)
def test_an_auto_spec_takes_the_requested_backend(requested):
    assert chosen_backend("auto", requested) == requested
    assert kept_backend_note("s", "auto", requested) is None


@pytest.mark.parametrize("pinned", ["gloo", "nccl", "fake"])
def test_nothing_requested_is_the_spec_own(pinned):
    assert chosen_backend(pinned, None) == pinned
    assert chosen_backend(pinned, None, force=True) == pinned
    assert kept_backend_note("s", pinned, None) is None


def test_a_pinned_spec_keeps_its_backend_and_says_so():
    """premul_sum_refused_on_gloo is about gloo refusing PREMUL_SUM: on nccl it would check nothing."""
    assert chosen_backend("gloo", "nccl") == "gloo"
    assert chosen_backend("fake", "gloo") == "fake"
    assert kept_backend_note("premul_sum_refused_on_gloo", "gloo", "nccl") == (
        "note: premul_sum_refused_on_gloo keeps its backend gloo (pinned in the spec), not nccl; "
        "--force-backend runs it on nccl"
    )
    assert "--fsdp2-force-backend runs it" in kept_backend_note("s", "gloo", "nccl", force_flag="--fsdp2-force-backend")


def test_force_applies_the_requested_backend_to_pinned_specs():
    assert chosen_backend("gloo", "nccl", force=True) == "nccl"
    assert chosen_backend("fake", "auto", force=True) == "auto"
    assert kept_backend_note("s", "gloo", "nccl", force=True) is None


def test_requesting_the_pinned_backend_is_no_note():
    assert chosen_backend("gloo", "gloo") == "gloo"
    assert kept_backend_note("s", "gloo", "gloo") is None
