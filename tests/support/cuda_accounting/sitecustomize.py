"""Emulate FSDPMemTracker's CUDA accounting on CPU ranks: every storage counted rounded up to 512 B.

On CUDA, ``torch.distributed._tools.mem_tracker._WeakRefInfo._calculate_mem_consumed`` rounds
a storage's bytes up to the caching allocator's block (``_PYTORCH_MIN_ALLOCATE``, 512 B) when
``self.device.type == "cuda"``; on the CPU it counts them as they are. :func:`round_like_cuda`
makes it round on every device, so a CPU run's tracker figures are what a GPU run's would be.

A test puts this folder first on ``PYTHONPATH`` with :data:`FLAG` set: every Python it starts
(the CLI, the forkserver its ranks are forked from) imports this file as its ``sitecustomize``
and rounds. Or it calls :func:`round_like_cuda` with ``monkeypatch.setattr`` in its own process.
"""

from __future__ import annotations

import math
import os

FLAG = "FSDP2_TESTS_CUDA_ACCOUNTING"  # set to 1: round in every process that imports this file


def round_like_cuda(setattr=setattr) -> None:
    """Make FSDPMemTracker count every storage as its CUDA branch does (the same formula).

    Args:
        setattr: how to replace the method (pytest's ``monkeypatch.setattr`` undoes it after the test).
    """
    from torch.distributed._tools import mem_tracker

    block = mem_tracker._PYTORCH_MIN_ALLOCATE  # 512 unless PYTORCH_NO_CUDA_MEMORY_CACHING

    def rounded(self) -> int:
        return math.ceil(self.size * self.element_size / block) * block

    setattr(mem_tracker._WeakRefInfo, "_calculate_mem_consumed", rounded)


if os.environ.get(FLAG) == "1":
    round_like_cuda()
