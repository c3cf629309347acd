"""torch.compile per FSDP unit on CPU: ``python benchmarks/bench_compile.py [--ranks 2] [--mode plain|dispatch_mode]``.

Two tiny Qwen3 decoder layers (d=64, h_q=4, h_kv=2, d_h=16, d_ffn=128, fp32), ``fully_shard``
per layer then the root over gloo ranks, ``layer.compile()`` on each layer, then two training
steps (forward, mean-of-squares loss, backward). Prints the wall time of the first step
(dynamo + inductor compile included) and of the second, and what dynamo captured
(``torch._dynamo.utils.counters``). ``--mode dispatch_mode`` runs the steps inside a do-nothing
``TorchDispatchMode``, as the harness's collective recorder is: dynamo then captures nothing and
the layers run eagerly.

Measured on this project's 2-core machine, loaded by other work (torch 2.13.0+cpu, 2 ranks):
plain: first step 319.9 s, second 0.15 s, 2 graphs, no graph break; dispatch_mode: first step
2.8 s, second 0.28 s, no graph captured. Hence the harness gates ``compile: true`` to CUDA runs
(harness/run/rank/parallelize.py COMPILE_ON_CPU).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import argparse
import contextlib
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils._python_dispatch import TorchDispatchMode


class _Passthrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _rank(rank: int, world: int, init_file: str, mode: str) -> None:
    from torch._dynamo.utils import counters
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import model as qwen3

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    config = qwen3.get_config(
        "walkthrough",
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    stack = qwen3.init_weights(qwen3.Qwen3DecoderStack(config), generator=torch.Generator().manual_seed(0))
    for layer in stack.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(stack, mesh=mesh)
    for layer in stack.layers:
        layer.compile()
    x = torch.randn(2, 8, 64)
    times = []
    for _ in range(2):
        start = time.perf_counter()
        with _Passthrough() if mode == "dispatch_mode" else contextlib.nullcontext():
            stack(x).float().pow(2).mean().backward()
        times.append(time.perf_counter() - start)
    if rank == 0:
        print(
            f"mode={mode} ranks={world}: first step {times[0]:.1f} s, second {times[1]:.2f} s; "
            f"dynamo graphs {counters['stats'].get('unique_graphs', 0)}, "
            f"graph breaks {sum(counters['graph_break'].values())}"
        )
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--mode", choices=("plain", "dispatch_mode"), default="plain")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_rank, args=(args.ranks, os.path.join(tmp, "rdv"), args.mode), nprocs=args.ranks)


if __name__ == "__main__":
    main()
