"""The walkthrough's step with plain torch and FSDPMemTracker: the harness's memory reference.

    python scripts/torch_memory_reference.py --out /tmp/torch_memory.json [--runs 1]

Nothing of ``harness/`` is imported: the project's Qwen3 model (``model/``, the same modules
the harness runs), torch's ``fully_shard`` and ``torch.distributed._tools.fsdp2_mem_tracker.
FSDPMemTracker``, 4 gloo ranks started with ``torch.multiprocessing`` (forkserver). The step is the
walkthrough spec's (``specs/qwen3_walkthrough.yaml``): two decoder layers in float16, seed 0,
B=2, L=8, hidden states drawn from N(0, 1) with seed 1 as the whole batch and each rank taking
its rows; ``fully_shard`` on each layer then on the root; AdamW (lr 0.01); forward, the loss
``out.float().pow(2).mean()``, backward, ``optimizer.step()``.

Written: ``{"torch_version", "runs": [{"ranks": [{"rank", "memory": [...]}]}]}``, each memory
record ``{"module", "state", "occurrence", "bytes": {FSDPMemTracker's category name: bytes}}``:
the tracker's per-module snapshots (module FQN, ``_FSDPModState`` value, the n-th snapshot of
that state), plus ``"After fully_shard"`` (as the tracker starts), ``"After Optimizer Step"``
and ``"Peak"`` under module ``""``. Bytes are summed over devices. ``tests/integration/
test_torch_memory_reference.py`` puts the harness's observation against it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project's model package

import argparse
import json
import os
import socket
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD_SIZE, B, L, SEED, LR = 4, 2, 8, 0, 0.01


def _bytes(snapshot) -> dict[str, int]:
    out: dict[str, int] = {}
    for per_device in snapshot.values():
        for reftype, value in per_device.items():
            key = str(getattr(reftype, "value", reftype))
            out[key] = out.get(key, 0) + int(value)
    return out


def _rank(rank: int, port: int, folder: str) -> None:
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.fsdp import fully_shard

    import model as qwen3

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    try:
        config = qwen3.get_config("walkthrough", num_hidden_layers=2)
        root = qwen3.Qwen3DecoderStack(config, device=torch.device("cpu"), dtype=torch.float16)
        qwen3.init_weights(root, generator=torch.Generator().manual_seed(SEED))
        batch = torch.randn(
            WORLD_SIZE * B, L, config.hidden_size, generator=torch.Generator().manual_seed(SEED + 1)
        ).to(torch.float16)
        x = batch[rank * B : (rank + 1) * B].clone()
        del batch
        for layer in root.layers:
            fully_shard(layer, reshard_after_forward=True)
        fully_shard(root, reshard_after_forward=True)
        optimizer = torch.optim.AdamW(root.parameters(), lr=LR)
        tracker = FSDPMemTracker(root, optimizer)
        tracker.track_inputs((x,))
        whole = []
        with tracker:
            whole.append(("After fully_shard", tracker.get_tracker_snapshot("current")))
            out = root(x)
            loss = out.float().pow(2).mean()
            loss.backward()
            optimizer.step()
            whole.append(("After Optimizer Step", tracker.get_tracker_snapshot("current")))
        names = {id(m): fqn for fqn, m in root.named_modules()}
        memory = []
        for module, stats in tracker.memory_tracking.items():
            fqn = names.get(id(module))
            if fqn is None:
                continue
            for state, snaps in stats.snapshots.items():
                for i, snap in enumerate(snaps):
                    memory.append(
                        {
                            "module": fqn,
                            "state": str(getattr(state, "value", state)),
                            "occurrence": i,
                            "bytes": _bytes(snap),
                        }
                    )
        for state, snap in whole + [("Peak", tracker.get_tracker_snapshot("peak"))]:
            memory.append({"module": "", "state": state, "occurrence": 0, "bytes": _bytes(snap)})
        Path(folder, f"rank{rank}.json").write_text(json.dumps({"rank": rank, "memory": memory}))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once() -> dict:
    """One run of 4 ranks: ``{"ranks": [...]}`` in rank order."""
    with tempfile.TemporaryDirectory(prefix="torch-memory-reference-") as folder:
        mp.start_processes(_rank, args=(_free_port(), folder), nprocs=WORLD_SIZE, start_method="forkserver")
        return {"ranks": [json.loads(Path(folder, f"rank{r}.json").read_text()) for r in range(WORLD_SIZE)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    # Ranks fork from one server that has imported torch and FSDP (what a spawn pays per rank,
    # seconds each), as the harness's ranks do; torch._dynamo: FSDP's hooks import it on first call.
    mp.set_forkserver_preload(["torch", "torch.distributed.fsdp", "torch._dynamo", "model"])
    runs = [run_once() for _ in range(args.runs)]
    args.out.write_text(json.dumps({"torch_version": str(torch.__version__), "runs": runs}))
    print(f"wrote {args.out} ({args.runs} runs of {WORLD_SIZE} ranks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
