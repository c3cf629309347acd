"""The check kinds, one module each; :data:`REGISTRY` maps a table's ``check:`` to its definition.

Adding a kind: a module here defining ``KIND`` (a :class:`harness.language.vocabulary.CheckKind`),
listed below; then regenerate the schema and docs/check-kinds.md's table (``python -m harness.load.docs``).
"""

from __future__ import annotations

from harness.language.kinds import (
    bandwidth,
    buffer,
    collectives,
    custom,
    environment,
    events,
    expect_error,
    experts,
    grad_norm,
    grads,
    input,
    memory,
    numerics,
    param,
    param_state,
    param_update,
    params_total,
    reduce_op,
    state_dict,
    state_dict_get,
    state_dict_set,
    step,
    unit_dtypes,
)
from harness.language.vocabulary import CheckKind

REGISTRY: dict[str, CheckKind] = {
    m.KIND.name: m.KIND
    for m in (
        param,
        params_total,
        input,
        step,
        param_state,
        collectives,
        memory,
        numerics,
        events,
        param_update,
        grad_norm,
        grads,
        unit_dtypes,
        state_dict,
        state_dict_get,
        state_dict_set,
        environment,
        bandwidth,
        reduce_op,
        expect_error,
        experts,
        custom,
        buffer,
    )
}
"""Check kind name -> definition, in the order docs/check-kinds.md lists them."""


def get_kind(name: str) -> CheckKind:
    """The definition of check kind ``name``.

    Raises:
        ValueError: no such kind (the message lists the kinds).
    """
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown check kind {name!r}; expected one of {list(REGISTRY)}") from None
