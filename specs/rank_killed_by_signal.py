"""Hooks of specs/rank_killed_by_signal.yaml: rank 1 dies by SIGSEGV, as a crash in native code
(a segfault in a kernel or an extension) would end it."""

import os
import signal


def crash_rank_1_after_layer_1(model, step_index, rank, world_size):
    """On rank 1: a forward hook on layers.1 that sends this process SIGSEGV when the layer returns."""
    if rank != 1:
        return

    def die(module, args, output):
        os.kill(os.getpid(), signal.SIGSEGV)

    model.get_submodule("layers.1").register_forward_hook(die)
