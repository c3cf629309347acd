"""A simulated rank's storage: its model sharded without data, then given fake tensors for the step.

``fully_shard`` runs outside ``FakeTensorMode``, where its per-rank ops cost far less: see
docs/simulated-backend.md, "Where a simulated rank's time goes".
"""

from __future__ import annotations

from typing import Any

__all__ = ["LAZY_SHARD_BYTES", "storage_for_sharding", "materialize_fake"]


# fully_shard copies the rank's rows into a zeroed, padded shard: that much memory is written.
LAZY_SHARD_BYTES = 256 * 2**20


def storage_for_sharding(root: Any, shard_group_size: int) -> str:
    """Put the ``meta``-built ``root`` where ``fully_shard`` is cheapest and return that device type:
    ``"cpu"`` (``to_empty``: untouched storage) when this rank's shards take at most
    :data:`LAZY_SHARD_BYTES`, else ``"meta"``."""
    total = sum(p.numel() * p.element_size() for p in root.parameters())
    if total // max(shard_group_size, 1) > LAZY_SHARD_BYTES:
        return "meta"
    root.to_empty(device="cpu")
    if hasattr(root, "tie_weights"):  # to_empty makes a Parameter per module: tie them again
        root.tie_weights()
    return "cpu"


def materialize_fake(root: Any, device: Any) -> None:
    """Inside ``FakeTensorMode``: give the sharded ``root`` fake storage on ``device`` (``to_empty``).
    Each parameter group's lazy init runs here, not at the first forward, where its re-padding of a
    fake shard (data pointer 0) counted as an activation in the memory tracker. A group torch refuses
    at lazy init is left to its own, so the error is raised in forward, as on a real backend. RoPE's
    ``inv_freq`` is recomputed (values unused)."""
    from torch.distributed.fsdp import FSDPModule

    import model as qwen3

    root.to_empty(device=device)
    for m in root.modules():
        if isinstance(m, FSDPModule):
            for group in m._get_fsdp_state()._fsdp_param_groups:
                try:
                    group.lazy_init()  # idempotent: FSDP's own lazy init skips it later
                except Exception:  # noqa: BLE001 - torch raises it again at its own lazy init, in forward, as on gloo
                    pass
    for m in root.modules():
        if isinstance(m, qwen3.Qwen3RotaryEmbedding):
            m.reset_parameters()
