"""One-line hints added to errors torch raises for a key a CPU run cannot serve, so the failed run
says how to run the spec (as the memory tracker's limit note does); the errors themselves are
pinned by specs (``dp_mesh_dims_flash_attention.yaml``, ``post_optim_event_on_gloo.yaml``)."""

from __future__ import annotations

__all__ = ["HINTS", "error_hint"]

HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("_scaled_dot_product_flash_attention_for_cpu", "sharding strategy"),
        "DTensor has no sharding strategy for the CPU flash attention kernel (setup.fsdp.dp_mesh_dims runs the "
        "model as DTensor code): setup.model.attention_kernel: math avoids it",
    ),
    (
        ("cpu backend doesn't support events",),
        "set_post_optim_event needs a CUDA device (schedule post_optim_event): run it on NCCL, or pin this CPU "
        "error with expect_error as specs/post_optim_event_on_gloo.yaml does",
    ),
)
"""(words every one of which the error's message holds, the hint)."""


def error_hint(exc: BaseException) -> str | None:
    """The hint of the first :data:`HINTS` entry whose words ``exc``'s message holds, or None."""
    message = str(exc)
    return next((hint for words, hint in HINTS if all(w in message for w in words)), None)
