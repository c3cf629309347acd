"""Emulate NCCL's dispatch-level return values on CPU ranks: a synchronous c10d op hands back no ``Work``.

On NCCL (seen with torch 2.11, NCCL 2.28.9) a c10d op called with ``async_op=False`` waits in C++
and hands back, at dispatch level, a boxed ``Work`` that ``Work.unbox`` turns into ``None``;
``torch.distributed``'s Python side then skips its ``work.wait()`` ("the backend has sync'ed at
CPP level"). Only ``async_op=True`` gives a ``Work`` (with a future). gloo always hands back a
``Work``. :func:`emulate_nccl_dispatch` makes every c10d op called from Python (which is how a
``TorchDispatchMode`` such as the harness's recorders runs it) behave as NCCL's: a synchronous
one is waited on here and returns ``Work.boxed(None)``; an asynchronous one is untouched.

A test puts this folder first on ``PYTHONPATH`` with :data:`FLAG` set to ``1``: every Python it
starts (the CLI, the forkserver its ranks are forked from) imports this file as its
``sitecustomize`` and emulates. Or a test calls :func:`emulate_nccl_dispatch` with
``monkeypatch.setattr`` in its own process.
"""

from __future__ import annotations

import os

FLAG = "FSDP2_TESTS_NCCL_DISPATCH"  # set to 1: emulate in every process that imports this file


def _async_op(op, args: tuple, kwargs: dict) -> bool | None:
    """The ``async_op`` argument of a c10d op's call (its default when not passed); None: the op has none."""
    for i, argument in enumerate(op._schema.arguments):
        if argument.name == "async_op":
            if "async_op" in kwargs:
                return bool(kwargs["async_op"])
            return bool(args[i]) if i < len(args) else bool(argument.default_value)
    return None


def emulate_nccl_dispatch(setattr=setattr) -> None:
    """Make synchronous c10d ops called from Python return no ``Work``, as NCCL's do.

    Args:
        setattr: how to replace the ops' ``__call__`` (pytest's ``monkeypatch.setattr`` undoes it).
    """
    import torch

    work_class = torch.distributed.distributed_c10d.Work
    # c10d ops take ScriptObjects (ProcessGroup, ReduceOp): their overloads are TorchBindOpOverload
    overload_class = type(torch.ops.c10d.allreduce_.default)
    original = overload_class.__call__

    def call(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if self.namespace != "c10d" or _async_op(self, args, kwargs) is not False:
            return out
        values = out if isinstance(out, tuple) else (out,)
        replaced = []
        for value in values:
            if isinstance(value, torch.ScriptObject):
                work = work_class.unbox(value)
                if work is not None:
                    work.wait()  # NCCL syncs in C++: the caller gets nothing to wait on
                    value = work_class.boxed(None)
            replaced.append(value)
        return tuple(replaced) if isinstance(out, tuple) else replaced[0]

    setattr(overload_class, "__call__", call)


if os.environ.get(FLAG) == "1":
    emulate_nccl_dispatch()
