"""A simulated rank's storage: its model sharded without data, then given fake tensors for the step.

Where the time goes as the world grows. ``fully_shard`` is called *outside* ``FakeTensorMode``
on a model without data (:func:`storage_for_sharding`), and the sharded model is then given
fake storage inside it (:func:`materialize_fake`) for the step. Inside ``FakeTensorMode`` every
op is a Python dispatch (about 100 us here), and FSDP2 issues a number of ops per parameter
that grows with the shard-group size ``W``: torch 2.13's ``_chunk_with_empty``
(``torch/distributed/fsdp/_fully_shard/_fsdp_common.py``) makes ``torch.chunk``'s views (up to
``W``) and then one ``new_empty(0)`` for each rank left without rows, and ``FSDPParam`` calls it
twice per parameter (``_init_sharded_param`` and ``_init_sharded_post_forward_param_metadata``):
about 247,000 ops at 16,384 ranks for one Qwen3-32B layer. That loop is torch's and stays
linear in ``W``; what is left to choose is what one op costs. ``new_empty`` on a ``meta``
tensor runs a Python reference (about 14 us); on a CPU tensor it is C++ (about 1.5 us), so a
model whose rank shard is small (:data:`LAZY_SHARD_BYTES`) is sharded from CPU storage that is
reserved but never written (``torch.empty``: the kernel backs untouched pages on first write,
and ``fully_shard`` copies only this rank's rows). The forward, backward and optimizer step do
not grow with ``W``. Past what a simulation reaches in seconds, the closed-form
``harness.calculator`` gives the same sizes (``tests/unit/calculator/test_calculator_vs_fake.py``
cross-checks the two up to 16,384 ranks).
"""

from __future__ import annotations

from typing import Any

__all__ = ["LAZY_SHARD_BYTES", "storage_for_sharding", "materialize_fake"]


# fully_shard copies the rank's rows into a zeroed, padded shard: that much memory is written.
LAZY_SHARD_BYTES = 256 * 2**20


def storage_for_sharding(root: Any, shard_group_size: int) -> str:
    """Put the ``meta``-built ``root`` on the storage where ``fully_shard`` is cheapest.

    ``"cpu"`` (``root.to_empty(device="cpu")``: uninitialized, untouched storage) when this
    rank's shards take at most :data:`LAZY_SHARD_BYTES` (the model's parameter bytes divided by
    ``shard_group_size``, the last mesh dim), else ``"meta"`` (left as it is). The values are
    never read: :func:`materialize_fake` replaces every tensor by a fake one before the step.

    Returns:
        the device type ``root`` is on: ``"cpu"`` or ``"meta"``.
    """
    total = sum(p.numel() * p.element_size() for p in root.parameters())
    if total // max(shard_group_size, 1) > LAZY_SHARD_BYTES:
        return "meta"
    root.to_empty(device="cpu")
    if hasattr(root, "tie_weights"):  # to_empty makes a Parameter per module: tie them again
        root.tie_weights()
    return "cpu"


def materialize_fake(root: Any, device: Any) -> None:
    """Inside ``FakeTensorMode``: give the sharded ``root`` fake storage on ``device``.

    ``root.to_empty(device=device)`` swaps every parameter (FSDP's ``DTensor`` shards, the tied
    weights kept tied) and buffer for a fake tensor of the same shape and dtype; FSDP2's
    ``_apply`` re-pads the shards (``FSDPParam.reset_sharded_param``), as after a meta-device
    init on real ranks. Each FSDP parameter group's lazy init then runs here, before the step:
    it re-pads again unless the shard's storage is the padded one, which it tells by data
    pointer, and a fake tensor's is 0. Left to the first forward, it replaced an uneven (last
    rank's) padded shard under the memory tracker, which counted the new one as an activation
    and no sharded parameter; on a real rank it finds the same storage and does nothing.
    RoPE's ``inv_freq`` is recomputed (values unused: nothing is read).
    """
    from torch.distributed.fsdp import FSDPModule

    import model as qwen3

    root.to_empty(device=device)
    for m in root.modules():
        if isinstance(m, FSDPModule):
            for group in m._get_fsdp_state()._fsdp_param_groups:
                group.lazy_init()  # idempotent: FSDP's own lazy init skips it later
    for m in root.modules():
        if isinstance(m, qwen3.Qwen3RotaryEmbedding):
            m.reset_parameters()
