"""Rank bodies for tests/integration/test_passive_instruments.py: the harness's step with one instrument off.

``harness.run.launch.local.run_local(step="tests.support.passive_bodies:NAME")`` runs these in each rank (the
tests folder is on the ranks' path, as pytest puts it on its own).
"""

from __future__ import annotations

from typing import Any

from harness.run.rank.step import run_step


def without_hang_progress(setup: Any, rank: int, world_size: int, device_type: str, **kwargs: Any) -> dict:
    """The step with no hang-progress sink: the collective recorder reports nothing as entered or completed."""
    kwargs["collective_log"] = None
    return run_step(setup, rank, world_size, device_type, **kwargs)


def without_grad_norm_recorder(setup: Any, rank: int, world_size: int, device_type: str, **kwargs: Any) -> dict:
    """The step with ``clip_grad_norm_``'s returned norm not looked at."""
    from harness.run.rank.instruments import Instruments

    Instruments.record_grad_norm = lambda self, *args, **kw: None  # this rank process only
    return run_step(setup, rank, world_size, device_type, **kwargs)


def prints_then_raises(setup: Any, rank: int, world_size: int, device_type: str, **kwargs: Any) -> dict:
    """Writes to stdout (Python) and stderr (the file descriptor, as native code does), then fails."""
    import os

    print(f"a line rank {rank} printed")
    os.write(2, f"a line rank {rank} wrote to fd 2\n".encode())
    raise RuntimeError(f"rank {rank} gives up")


def without_param_updates(setup: Any, rank: int, world_size: int, device_type: str, **kwargs: Any) -> dict:
    """The step with no parameter-update tracker (a setup without numerics: nothing compares its records)."""
    import harness.run.rank.step as rank_step

    rank_step.ParamUpdates = lambda *args, **kw: None  # this rank process only
    return run_step(setup, rank, world_size, device_type, **kwargs)


def without_param_states(setup: Any, rank: int, world_size: int, device_type: str, **kwargs: Any) -> dict:
    """The step with no parameter-state hooks (no forward, backward or loop points) and no fully_shard call record."""
    import harness.run.rank.instruments as instruments

    class Nothing:
        states: list = []
        record: dict = {"before": [], "calls": []}

        def __init__(self, *args: Any, **kw: Any) -> None:
            pass

        def install(self) -> "Nothing":
            return self

        def __getattr__(self, name: str) -> Any:
            return lambda *args, **kw: None  # remove, snapshot_all, before, after

    instruments.ParamStateHooks = Nothing  # this rank process only
    instruments.FullyShardCalls = Nothing
    return run_step(setup, rank, world_size, device_type, **kwargs)


def without_grad_records(setup: Any, rank: int, world_size: int, device_type: str, **kwargs: Any) -> dict:
    """The step with no gradient (``grads``) and no resolved-dtype (``unit_dtypes``) records."""
    import harness.run.rank.instruments as instruments

    instruments.grad_records = lambda *args, **kw: []  # this rank process only
    instruments.unit_dtype_records = lambda *args, **kw: []
    return run_step(setup, rank, world_size, device_type, **kwargs)
