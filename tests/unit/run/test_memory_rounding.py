"""FSDPMemTracker's CUDA accounting (every storage rounded up to 512 B), forced on CPU: the
memory recorder keeps the storages' real bytes beside the tracker's own figure, and the
``memory`` check reads the real bytes (``tests/support/cuda_accounting/sitecustomize.py``)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

from harness.language.kinds.memory import measure
from harness.run.rank.recorders.memory import MemoryRecorder
from tests.support.cuda_accounting.sitecustomize import round_like_cuda

# 5 x 7 float32 weights (140 B) and 7-element biases (28 B): each far from a 512-B multiple
SHAPES = [(7, 5), (7,), (7, 7), (7,)]
REAL = sum(math.prod(s) * 4 for s in SHAPES)  # 140 + 28 + 196 + 28 = 392 B
ROUNDED = 512 * len(SHAPES)  # every storage its own 512-B block: 2,048 B


def _step_snapshots() -> list[dict]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.Linear(7, 7))
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    names = {model: "", model[0]: "0", model[1]: "1"}
    recorder = MemoryRecorder(model, optimizer, names)
    with recorder:
        model(torch.randn(3, 5)).sum().backward()
        optimizer.step()
        recorder.mark_after_step(0)
        recorder.mark_position(0, 0)
    return recorder.snapshots()


def _after_step(snapshots: list[dict]) -> dict:
    return next(s for s in snapshots if s["module"] == "" and s["state"] == "After Optimizer Step")


def test_cuda_rounding_kept_beside_the_real_bytes(one_rank, monkeypatch):
    round_like_cuda(monkeypatch.setattr)
    snap = _after_step(_step_snapshots())
    # the tracker's own figure, as on CUDA: each shard, gradient and AdamW state in its own block
    assert snap["bytes"]["sharded_param"] == ROUNDED
    # a unit's gradient shards are views of one reduce-scatter output: one block per unit
    assert snap["bytes"]["sharded_grad"] == 512 * 2
    # exp_avg + exp_avg_sq per parameter, and a 4-byte float32 step counter per parameter
    assert snap["bytes"]["optstate"] == 3 * ROUNDED
    assert snap["unrounded_bytes"]["sharded_param"] == REAL
    assert snap["unrounded_bytes"]["sharded_grad"] == REAL
    assert snap["unrounded_bytes"]["optstate"] == 2 * REAL + 4 * len(SHAPES)


def test_per_unit_and_peak_snapshots_carry_both(one_rank, monkeypatch):
    round_like_cuda(monkeypatch.setattr)
    snapshots = _step_snapshots()
    units = [s for s in snapshots if s["module"] == "1"]
    assert {s["state"] for s in units} >= {"After Pre-Forward", "After Post-Backward", "Peak Backward"}
    for snap in units + [s for s in snapshots if s["state"] == "Peak"]:
        assert set(snap["unrounded_bytes"]) == set(snap["bytes"]), snap
        assert snap["unrounded_bytes"]["sharded_param"] == REAL, snap
        assert snap["bytes"]["sharded_param"] == ROUNDED, snap
        if not snap["state"].startswith("Peak"):  # a peak of each figure is taken when that figure peaks
            for category, value in snap["unrounded_bytes"].items():  # rounding only ever adds
                assert value <= snap["bytes"][category], (snap["state"], category)


def test_on_cpu_accounting_the_two_figures_agree(one_rank):
    for snap in _step_snapshots():
        assert snap["unrounded_bytes"] == snap["bytes"], snap


def test_the_memory_check_reads_the_real_bytes():
    rank = {
        "rank": 0,
        "memory": [
            {
                "module": "",
                "state": "After Optimizer Step",
                "bytes": {"optstate": 3 * ROUNDED},
                "unrounded_bytes": {"optstate": 2 * REAL + 16},
            }
        ],
    }
    observation = {"ranks": [rank]}
    assert measure({"module": "", "state": "After Optimizer Step"}, observation) == {0: {"optstate": 2 * REAL + 16}}
    del rank["memory"][0]["unrounded_bytes"]  # a document from before the field (CPU ranks): read bytes
    assert measure({"module": "", "state": "After Optimizer Step"}, observation) == {0: {"optstate": 3 * ROUNDED}}
