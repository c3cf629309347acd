"""The walkthrough step without the harness: the baseline for ``bench_launch.py``.

What a user would write to run the document's setup on 4 CPU ranks: ``mp.spawn`` 4 ranks
(each a fresh interpreter importing torch), a file rendezvous, the walkthrough model in fp16
(2 decoder layers, seeded), ``fully_shard`` per layer then the root over a 1-D ``dp`` mesh,
one forward, ``output.float().pow(2).mean()``, backward, an SGD step. Nothing is recorded.

Run: ``python benchmarks/plain_step.py``; prints the wall time from start to all ranks done.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

T0 = time.perf_counter()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WORLD = 4
B, L = 2, 8


def rank_main(rank: int, init_file: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import model

    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=WORLD)
    config = model.get_config("walkthrough")
    stack = model.Qwen3DecoderStack(config, dtype=torch.float16)
    model.init_weights(stack, generator=torch.Generator().manual_seed(0))
    mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("dp",))
    for layer in stack.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(stack, mesh=mesh)
    optimizer = torch.optim.SGD(stack.parameters(), lr=1e-2)
    batch = torch.randn(WORLD * B, L, config.hidden_size, generator=torch.Generator().manual_seed(1)).half()
    x = batch[rank * B : (rank + 1) * B]  # rank r holds samples r*B .. r*B+B-1
    loss = stack(x).float().pow(2).mean()
    loss.backward()
    optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(rank_main, args=(os.path.join(tmp, "rendezvous"),), nprocs=WORLD, join=True)
    print(f"plain step, {WORLD} ranks: {time.perf_counter() - T0:.2f} s")
