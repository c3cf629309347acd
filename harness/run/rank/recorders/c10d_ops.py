"""The table of c10d ops: which dispatched op is which collective, and c10d's ReduceOp codes.

Source: torch 2.13 ``torch/csrc/distributed/c10d/Ops.cpp``, ``Functional.cpp``, ``Types.hpp``.
"""

from __future__ import annotations

__all__ = [
    "NAMESPACES",
    "NOT_COLLECTIVES",
    "OP_KIND",
    "REDUCE_OPS",
    "FUNCTIONAL_REDUCE_OPS",
    "dtype_name",
    "op_kind",
    "is_collective",
]

NAMESPACES = ("c10d", "_c10d_functional")
"""Namespaces whose ops are collectives. ``_c10d_functional`` is what DTensor and compiled code
use; eager FSDP2 issues the in-place ``c10d`` ops."""

NOT_COLLECTIVES = frozenset({"wait_tensor", "wait", "work_wait", "_wrap_tensor_autograd"})
"""Ops of those namespaces that move nothing: waits, and DTensor's autograd wrapper of a
functional collective's result (clip_grad_norm_ over DTensor gradients dispatches it after its
all_reduce)."""

OP_KIND: dict[str, str] = {
    "_allgather_base_": "all_gather",
    "allgather_": "all_gather",
    "allgather_coalesced_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "all_gather_into_tensor_out": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "allreduce_": "all_reduce",
    "allreduce_coalesced_": "all_reduce",
    "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "all_reduce_coalesced_": "all_reduce",
    "broadcast_": "broadcast",
    "broadcast": "broadcast",
    "alltoall_": "all_to_all",
    "alltoall_base_": "all_to_all",
    "all_to_all_single": "all_to_all",
    "barrier": "barrier",
    "monitored_barrier_": "barrier",
    "send": "send",
    "recv_": "recv",
    "recv_any_source_": "recv",
}
"""Op name (without namespace and overload) -> the observation's collective kind."""

REDUCE_OPS: dict[int, str] = {
    0: "SUM",
    1: "AVG",
    2: "PRODUCT",
    3: "MIN",
    4: "MAX",
    5: "BAND",
    6: "BOR",
    7: "BXOR",
    8: "PREMUL_SUM",
}
"""c10d's ``ReduceOp.RedOpType`` values: what the boxed ReduceOp of a dispatched c10d op
reports through its one method, ``op()``."""

FUNCTIONAL_REDUCE_OPS: dict[str, str] = {
    "sum": "SUM",
    "avg": "AVG",
    "product": "PRODUCT",
    "min": "MIN",
    "max": "MAX",
    "band": "BAND",
    "bor": "BOR",
    "bxor": "BXOR",
    "premul_sum": "PREMUL_SUM",
}
"""The ``reduce_op`` string a ``_c10d_functional`` op carries (``"sum"``, ``"max"``; DTensor's
``Partial(max)`` reduction passes ``"max"``) -> the same names as :data:`REDUCE_OPS`
(``torch/csrc/distributed/c10d/Functional.cpp``, ``to_reduce_op``)."""


def op_kind(op_name: str) -> str:
    """``"_allgather_base_"`` -> ``"all_gather"``; an op outside the table is ``"other"``."""
    return OP_KIND.get(op_name, "other")


def is_collective(namespace: str, op_name: str) -> bool:
    """Whether a dispatched op (``func.namespace``, its schema name without namespace) is a collective."""
    return namespace in NAMESPACES and op_name not in NOT_COLLECTIVES


def dtype_name(dtype) -> str:
    """``torch.float16`` -> ``"float16"`` (the observation document's dtype names)."""
    return str(dtype).removeprefix("torch.")
