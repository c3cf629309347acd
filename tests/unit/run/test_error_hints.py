"""The hints added to errors torch raises for a key a CPU run cannot serve: each names the setting
that avoids the error, and an unrelated error gets none."""

from __future__ import annotations

from harness.run.rank.error_hints import error_hint


def test_the_cpu_flash_attention_error_under_dtensor_names_the_math_kernel():
    exc = NotImplementedError(
        "Operator aten._scaled_dot_product_flash_attention_for_cpu.default does not have a sharding strategy "
        "registered."
    )
    assert "attention_kernel: math" in error_hint(exc)


def test_the_cpu_event_error_names_nccl_and_the_pinning_spec():
    hint = error_hint(RuntimeError("cpu backend doesn't support events."))
    assert "NCCL" in hint and "post_optim_event_on_gloo.yaml" in hint


def test_another_error_gets_no_hint():
    assert error_hint(RuntimeError("expected m1 and m2 to have the same dtype")) is None
