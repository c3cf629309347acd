"""Bytes the bandwidth check allocates to build and verify one row, before and after building the
patterns in the collective's dtype (harness/run/bandwidth.py), at the real sizes, allocating nothing.

Each function runs under torch's FakeTensorMode (tensors have shapes and dtypes, no storage) inside
a TorchDispatchMode that records every op's output bytes. The baseline is the code as of commit
3bb4b1a (int64 patterns and float64 comparisons at full size), read from git. Rows: a Qwen3-32B
decoder layer (487,598,336 elements, bfloat16) on 4 ranks: all-gather, reduce-scatter, all-reduce.
The check ends in ``int(...)``, which a fake tensor cannot answer; what it allocated by then is
counted. Prints, per row and version, the peak bytes alive while building the rank's input (the
input itself included) and while checking its output (the output excluded: made before).

    PYTHONPATH=. python benchmarks/bench_bandwidth_transients.py
"""

from __future__ import annotations

import subprocess
import sys
import types
import weakref
from pathlib import Path

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from harness.run import bandwidth
from harness.run.bandwidth import PlannedRow

REPO = Path(__file__).resolve().parents[1]
BASELINE = "3bb4b1a"
NUMEL, RANKS = 487_598_336, 4


class Outputs(TorchDispatchMode):
    """Bytes of the op outputs alive at once (a finalizer subtracts a tensor when it is freed); views
    count as their own bytes, so the figure is an upper bound."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0

    def _freed(self, n: int) -> None:
        self.live -= n

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and func not in VIEWS:
                n = t.numel() * t.element_size()
                self.live += n
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._freed, n)
        return out


VIEWS = {
    torch.ops.aten.slice.Tensor,
    torch.ops.aten.view.default,
    torch.ops.aten.alias.default,
    torch.ops.aten.select.int,
    torch.ops.aten._unsafe_view.default,
}


def baseline_module() -> types.ModuleType:
    source = subprocess.run(
        ["git", "show", f"{BASELINE}:harness/run/bandwidth.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType("bandwidth_baseline")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, "bandwidth_baseline.py", "exec"), module.__dict__)  # noqa: S102 - the repo's own history
    return module


def measure(module: types.ModuleType, op: str) -> tuple[int, int]:
    """(peak bytes alive while building this rank's input, while checking its output)."""
    row = PlannedRow("qwen3_32b_layer", "sweep", op, torch.bfloat16, NUMEL, NUMEL, RANKS, None, None)
    chunk = NUMEL // RANKS
    with FakeTensorMode():
        device = torch.device("cpu")
        out = torch.empty(chunk if op == "reduce_scatter" else NUMEL, dtype=torch.bfloat16)
        with Outputs() as build:
            module._pattern(chunk if op == "all_gather" else NUMEL, 1, torch.bfloat16, device)
        with Outputs() as check:
            try:
                module._wrong(module.PlannedRow(*[getattr(row, f) for f in row.__dataclass_fields__]), out, 1, device)
            except Exception:  # noqa: BLE001 - int() of a fake tensor: the allocations are recorded by then
                pass
    return build.peak, check.peak


def main() -> None:
    old = baseline_module()
    print(f"one Qwen3-32B layer row: {NUMEL:,} elements, bfloat16 ({NUMEL * 2 / 1e9:.3f} GB), {RANKS} ranks")
    print(f"{'op':<16}{'version':<10}{'peak building input (GB)':>26}{'peak checking output (GB)':>27}")
    for op in ("all_gather", "reduce_scatter", "all_reduce"):
        for name, module in (("baseline", old), ("now", bandwidth)):
            build, check = measure(module, op)
            print(f"{op:<16}{name:<10}{build / 1e9:>26.3f}{check / 1e9:>27.3f}")


if __name__ == "__main__":
    main()
