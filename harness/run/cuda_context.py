"""The GPU memory one rank's CUDA context takes, measured once per GPU model and torch, then cached.

``harness.run.preflight.gpu_need`` counts it for every NCCL rank. A child process measures it (the
caller must hold no CUDA context): NVML's used memory (``harness.run.gpus``) before and after one
tensor on ``cuda:0``. It is kept in ``cuda_context.json`` of :func:`cache_dir` by GPU and torch
version; where nothing can be measured the figure is :data:`FALLBACK_BYTES`."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["FALLBACK_BYTES", "cache_dir", "context_bytes", "measure"]

FALLBACK_BYTES = 545 * 10**6
"""A bare CUDA context on one H200 with torch 2.11.0+cu130 (issue 39; ``scripts/gpu_check``'s
``contexts_per_gpu``), used where no figure can be measured."""

_MEASURE = """
import json, sys
from harness.run.gpus import visible_gpus
before = visible_gpus()
import torch
torch.empty(1, device="cuda")
torch.cuda.synchronize()
after = visible_gpus()
if before and after:
    grown = before[0].free_bytes - after[0].free_bytes
    print(json.dumps({"bytes": grown, "gpu": torch.cuda.get_device_name(0), "total": after[0].total_bytes,
                      "torch": torch.__version__}))
"""

_TIMEOUT_S = 120.0


def cache_dir() -> Path:
    """``$FSDP2_HARNESS_CACHE``, else ``$XDG_CACHE_HOME/fsdp2-harness`` (``~/.cache/fsdp2-harness``)."""
    if os.environ.get("FSDP2_HARNESS_CACHE"):
        return Path(os.environ["FSDP2_HARNESS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fsdp2-harness"


def measure(python: str = sys.executable, timeout_s: float = _TIMEOUT_S) -> dict | None:
    """``{"bytes", "gpu", "total", "torch"}`` from a child that makes a CUDA context on GPU 0; None when
    it cannot (no GPU, no NVML, failed, or over ``timeout_s``)."""
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(
            [python, "-c", _MEASURE], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return None
    try:
        found = json.loads(lines[-1])
    except ValueError:
        return None
    return found if isinstance(found.get("bytes"), int) and found["bytes"] > 0 else None


def _gpu_key() -> str | None:
    """The first visible GPU's identity for the cache (its memory size: NVML gives no name here), or None."""
    if not glob.glob("/dev/nvidia[0-9]*"):
        return None
    from harness.run.gpus import visible_gpus

    gpus = visible_gpus()
    return f"gpu of {gpus[0].total_bytes} B" if gpus else None


def context_bytes(torch_version: str | None = None, measure=measure) -> int:
    """Bytes of one rank's CUDA context on GPU 0: cached, else measured and cached, else
    :data:`FALLBACK_BYTES`. ``torch_version``: the ranks' torch (default: its installed metadata)."""
    key = _gpu_key()
    if key is None:
        return FALLBACK_BYTES
    if torch_version is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            torch_version = version("torch")
        except PackageNotFoundError:
            return FALLBACK_BYTES
    key = f"{key}, torch {torch_version}"
    path = cache_dir() / "cuda_context.json"
    cached: dict = {}
    with contextlib.suppress(OSError, ValueError):
        cached = json.loads(path.read_text())
    if isinstance(cached.get(key), int):
        return cached[key]
    found = measure()
    if found is None:
        return FALLBACK_BYTES
    cached[key] = found["bytes"]
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cached, indent=1, sort_keys=True))
        tmp.replace(path)  # atomic: xdist workers may write at once
    return found["bytes"]
