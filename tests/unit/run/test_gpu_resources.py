"""GPU-safe resources, proven on CPU: free GPU memory read without a CUDA context, the pre-flight
estimate's context/NCCL/replica terms, one NCCL run at a time per set of GPUs under xdist, and the
bandwidth check's patterns built in the collective's own dtype."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.load.setup import RunSetup
from harness.run import cuda_context, gpus, preflight
from harness.run.preflight import PreflightError
from tests.support import REPO

UUIDS = [f"GPU-{i}aaaaaaa-0000-0000-0000-00000000000{i}" for i in range(4)]


def fake_smi(tmp_path: Path, monkeypatch, free_mib: list[int], total_mib: int = 81559) -> Path:
    """A stand-in ``nvidia-smi`` first on PATH that prints the query table for ``free_mib``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    rows = "\\n".join(f"{i}, {UUIDS[i]}, {free}, {total_mib}" for i, free in enumerate(free_mib))
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncase \"$1\" in --query-gpu=*) printf '{rows}\\n';; *) exit 3;; esac\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return script


# --- reading the GPUs without CUDA -----------------------------------------------------------------


def test_visible_devices_are_applied_as_the_cuda_runtime_applies_them():
    four = [gpus.Gpu(i, UUIDS[i], 10 * (i + 1), 100) for i in range(4)]
    assert gpus.parse_visible_devices(None, four) == four
    assert [g.index for g in gpus.parse_visible_devices("2,0", four)] == [2, 0]  # the list's order
    assert [g.index for g in gpus.parse_visible_devices(UUIDS[3][:8], four)] == [3]  # a UUID prefix
    assert gpus.parse_visible_devices("", four) == [] and gpus.parse_visible_devices("-1", four) == []
    assert [g.index for g in gpus.parse_visible_devices("1,7,2", four)] == [1]  # stops at a missing one
    assert [g.index for g in gpus.parse_visible_devices("1,1", four)] == [1]
    assert gpus.parse_visible_devices("MIG-abc", four) is None


def test_free_memory_from_nvidia_smi_in_visible_order(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, [1000, 2000, 3000, 4000])
    found = gpus.smi_gpus()
    assert [(g.index, g.uuid, g.free_bytes) for g in found] == [(i, UUIDS[i], (i + 1) * 1000 * 2**20) for i in range(4)]
    visible = gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "3,1"}, sources=(lambda: None, gpus.smi_gpus))
    assert [g.free_bytes for g in visible] == [4000 * 2**20, 2000 * 2**20]


def test_no_nvml_and_no_nvidia_smi_means_no_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    assert gpus.nvml_gpus(str(tmp_path / "libnvidia-ml.so.1")) is None  # not loadable
    assert gpus.nvml_gpus("libc.so.6") is None  # loadable, but no NVML symbols
    assert gpus.smi_gpus() is None and gpus.compute_processes() == []
    assert gpus.visible_gpus({}, sources=(lambda: None, gpus.smi_gpus)) is None


def test_an_nvidia_smi_table_it_cannot_read_gives_no_figures(tmp_path, monkeypatch):
    script = fake_smi(tmp_path, monkeypatch, [1000])
    script.write_text("#!/bin/sh\necho '0, GPU-x, [N/A], 80000'\n")
    assert gpus.smi_gpus() is None


# --- the pre-flight check --------------------------------------------------------------------------


@pytest.fixture
def cuda_that_counts_contexts(monkeypatch):
    """torch.cuda as a 4-GPU host shows it; every call that would create a CUDA context is recorded."""
    import torch

    contexts: list[object] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=None: contexts.append(i) or (10**12, 10**12))
    monkeypatch.setattr(torch.cuda, "init", lambda: contexts.append("init"))
    monkeypatch.setattr(preflight, "_gpu_device_nodes", lambda: True)
    return contexts


def test_preflight_reads_gpu_memory_without_creating_a_cuda_context(tmp_path, monkeypatch, cuda_that_counts_contexts):
    fake_smi(tmp_path, monkeypatch, [80000] * 4)
    monkeypatch.setattr(gpus, "nvml_gpus", lambda: None)
    assert preflight.check(RunSetup(), "auto", memory=10**12) is not None
    fake_smi(tmp_path, monkeypatch, [80000, 80000, 80000, 100])  # GPU 3 nearly full
    with pytest.raises(PreflightError, match="GB of GPU memory per rank on GPU 3 .*, 0.1 GB free on it"):
        preflight.check(RunSetup(), "nccl", memory=10**12)
    assert cuda_that_counts_contexts == []  # no torch.cuda.mem_get_info / init in this process


def test_preflight_says_it_skips_the_gpu_part_when_nothing_can_tell(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(gpus, "nvml_gpus", lambda: None)
    with pytest.warns(RuntimeWarning, match="the GPU part of the check is skipped"):
        assert preflight.check(RunSetup(), "nccl", memory=10**12) is not None
    monkeypatch.setattr(preflight, "_gpu_device_nodes", lambda: False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        preflight.check(RunSetup(), "auto", memory=10**12)  # a CPU host on auto: gloo, nothing to say


def test_gpu_estimate_counts_the_context_nccl_and_the_rank_0_replica(monkeypatch):
    context = 500 * 10**6  # what cuda_context measures once per GPU and torch (test_cuda_context.py)
    monkeypatch.setattr(cuda_context, "context_bytes", lambda: context)
    setup = RunSetup()  # the walkthrough: a few MB of tensors per rank
    est = preflight.estimate(setup)
    per_rank, on_gpu_0 = preflight.gpu_need(est, setup)
    assert per_rank == est.tensors + context + preflight.NCCL_COMMUNICATOR_BYTES
    with pytest.raises(PreflightError, match=r"GPU 0 \(.* GB tensors \+ 0.5 GB CUDA context \+ 0.3 GB NCCL\)"):
        preflight.check(setup, "nccl", memory=10**12, gpus=[est.tensors + 1] * 4)  # tensors alone fit
    assert preflight.check(setup, "nccl", memory=10**12, gpus=[per_rank] * 4) is not None
    hsdp = RunSetup.from_mapping({"mesh": {"shape": [2, 2], "dim_names": ["replicate", "shard"]}})
    assert (
        preflight.gpu_need(preflight.estimate(hsdp), hsdp)[0] - preflight.estimate(hsdp).tensors
        == context + 3 * preflight.NCCL_COMMUNICATOR_BYTES
    )  # world + one per mesh dim

    one = RunSetup.from_mapping({"numerics": True, "numerics_reference": "rank_0"})
    est = preflight.estimate(one)
    per_rank, on_gpu_0 = preflight.gpu_need(est, one)
    assert on_gpu_0 == per_rank + est.replica_once > per_rank
    with pytest.raises(PreflightError, match=r"on GPU 0 \(.* GB replica\)"):
        preflight.check(one, "nccl", memory=10**12, gpus=[per_rank] * 4)
    assert preflight.check(one, "nccl", memory=10**12, gpus=[on_gpu_0] + [per_rank] * 3) is not None


# --- one NCCL run at a time per set of GPUs --------------------------------------------------------

_HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from harness.pytest_plugin.cache import one_at_a_time
    lock, log = Path(sys.argv[1]), Path(sys.argv[2])
    def run():
        start = time.monotonic(); time.sleep(0.6)
        with open(log, "a") as f: f.write(f"{start} {time.monotonic()}\\n")
        return {}
    one_at_a_time(lock, run, lock_timeout_s=60)
""")


def test_runs_under_one_gpu_lock_do_not_overlap(tmp_path):
    from harness.pytest_plugin.cache import gpu_lock_path

    lock, log = gpu_lock_path(tmp_path, "0,1,2,3"), tmp_path / "intervals.txt"
    assert lock.name == "gpus-0_1_2_3.lock" and gpu_lock_path(tmp_path, None).name == "gpus-all.lock"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    workers = [subprocess.Popen([sys.executable, "-c", _HOLD, str(lock), str(log)], env=env) for _ in range(3)]
    assert [w.wait(timeout=120) for w in workers] == [0, 0, 0]
    intervals = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    assert len(intervals) == 3
    assert all(prev_end <= start for (_, prev_end), (start, _) in pairwise(intervals))


def _lock_is_held(path: Path) -> bool:
    """Whether another process holds the file lock ``path`` (asked from a fresh process)."""
    code = "import sys; from filelock import FileLock; FileLock(sys.argv[1], timeout=0).acquire()"
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, check=False).returncode != 0


@pytest.mark.parametrize(
    "backend, visible, locked", [("auto", 4, True), ("nccl", 4, True), ("auto", 0, False), ("gloo", 4, False)]
)
def test_the_plugin_runs_nccl_setups_under_the_gpu_lock(tmp_path, monkeypatch, backend, visible, locked):
    from harness import pytest_plugin
    from harness.run import runner

    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(pytest_plugin, "_gpu_count", lambda: visible)
    held = []
    monkeypatch.setattr(
        runner,
        "run_setup",
        lambda setup, **kw: held.append(_lock_is_held(tmp_path / "fsdp2-runs" / "gpus-all.lock")) or {"ranks": []},
    )
    options = {"--fsdp2-backend": backend, "--fsdp2-run-timeout": 30, "--fsdp2-no-preflight": True}
    config = SimpleNamespace(getoption=options.get, _tmp_path_factory=SimpleNamespace(getbasetemp=lambda: tmp_path))
    spec = SimpleNamespace(setup=RunSetup(), items=[], backend="auto", timeout_s=30, skip_reason=lambda *_: None)
    assert pytest_plugin.observation_of(config, spec) == {"ranks": []}
    assert held == [locked]


def test_the_plugin_skips_nccl_without_enough_gpus_counted_without_cuda(monkeypatch, cuda_that_counts_contexts):
    from harness import pytest_plugin

    monkeypatch.setattr(pytest_plugin, "_gpu_count", lambda: 2)
    config = SimpleNamespace(getoption={"--fsdp2-backend": "nccl"}.get)
    with pytest.raises(pytest.skip.Exception, match="needs 4 GPUs for nccl .*; 2 visible"):
        pytest_plugin.observation_of(
            config,
            SimpleNamespace(setup=RunSetup(), items=[], backend="auto", timeout_s=30, skip_reason=lambda *_: None),
        )


# --- the bandwidth check's patterns ----------------------------------------------------------------


def test_bandwidth_patterns_and_checks_allocate_nothing_wider_than_needed(monkeypatch):
    """A row of N elements in bfloat16 allocates its pattern in bfloat16 (N + 2 elements) and its
    comparison in bounded chunks: no int64/float64 tensor of N elements (today's 32B rows: GBs)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from harness.run.rank import collective_timing as bandwidth
    from harness.run.rank.collective_timing import PlannedRow, _pattern, _wrong

    class Allocations(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.sizes: list[tuple[torch.dtype, int]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() != 0:
                    self.sizes.append((t.dtype, t.untyped_storage().nbytes()))
            return out

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny chunks: intra-op threads only contend with each other
    # a row of 16 chunks (a 32B row is hundreds of them)
    monkeypatch.setattr(bandwidth, "CHECK_CHUNK", 3 * 2**14, raising=False)
    cpu, n, numel = torch.device("cpu"), 4, 16 * bandwidth.CHECK_CHUNK
    chunk = numel // n
    rs = PlannedRow("x", "sweep", "reduce_scatter", torch.bfloat16, numel, numel, n, None, None)
    ar = PlannedRow("x", "sweep", "all_reduce", torch.bfloat16, numel, numel, n, None, None)
    ag = PlannedRow("x", "sweep", "all_gather", torch.bfloat16, numel, numel, n, None, None)
    reduced = sum(_pattern(numel, j, torch.float32, cpu) for j in range(n)).to(torch.bfloat16)
    gathered = torch.cat([_pattern(chunk, j, torch.bfloat16, cpu) for j in range(n)])
    with Allocations() as mode:
        inputs = [_pattern(numel, 1, torch.bfloat16, cpu), _pattern(chunk, 1, torch.bfloat16, cpu)]
        results = [
            _wrong(ar, reduced, 1, cpu),
            _wrong(rs, reduced[chunk : 2 * chunk], 1, cpu),
            _wrong(ag, gathered, 1, cpu),
        ]
    assert results == [0, 0, 0]
    assert [t.dtype for t in inputs] == [torch.bfloat16] * 2 and inputs[0].numel() == numel
    assert inputs[0].untyped_storage().nbytes() <= (numel + 2) * 2
    wide = [size for dtype, size in mode.sizes if dtype.itemsize > 2]
    assert max(wide) <= 8 * bandwidth.CHECK_CHUNK, f"a {max(wide):,}-byte wide temporary"
    assert max(size for _, size in mode.sizes) <= (numel + 2) * 2

    reduced[7] += 1
    reduced[numel - 1] = float("nan")
    assert _wrong(ar, reduced, 1, cpu) == 2  # wrong values and NaN, past the first chunk
    torch.set_num_threads(threads)
