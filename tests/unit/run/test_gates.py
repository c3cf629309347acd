"""harness/run/gates.py: what skips a spec whole before anything runs (the running torch's build
or version, the GPUs nccl needs), one answer for ``run``, ``render`` and the pytest plugin."""

from __future__ import annotations

import pytest

from harness.load.spec import load_spec
from harness.run import gates
from tests.support.specs import TINY_2
from tests.support.specs import write_spec as write


def test_running_torch_names_this_build():
    import torch

    version, build = gates.running_torch()
    assert version == torch.__version__
    assert build == ("cpu" if torch.version.cuda is None else "cuda")


@pytest.mark.parametrize(
    "backend, world, gpus, reason",
    [
        ("nccl", 4, 0, "needs 4 GPUs for nccl (one per rank); 0 visible"),
        ("nccl", 4, 3, "needs 4 GPUs for nccl (one per rank); 3 visible"),
        ("nccl", 4, 4, None),
        ("gloo", 4, 0, None),
        ("auto", 4, 0, None),  # auto falls back to gloo
        ("fake", 1024, 0, None),
    ],
)
def test_gpu_gate(backend, world, gpus, reason, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(name, raising=False)
    assert gates.gpu_gate(backend, world, gpus) == reason


def test_under_torchrun_nccl_needs_one_gpu_per_local_rank(monkeypatch):
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("MASTER_ADDR", "node0")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert gates.gpu_gate("nccl", 8, 2) is None
    assert gates.gpu_gate("nccl", 8, 1) == "needs 2 GPUs for nccl (one per rank); 1 visible"


@pytest.mark.parametrize(
    "header, build, backend, reason",
    [
        ("torch_build: cuda\n", "cpu", "nccl", "describes a cuda build of torch; running 2.13.0+cpu, a cpu build"),
        ("torch_build: cuda\n", "cpu", "auto", "describes a cuda build of torch; running 2.13.0+cpu, a cpu build"),
        ("torch_build: cpu\n", "cuda", "gloo", "describes a cpu build of torch; running 2.13.0+cpu, a cuda build"),
        ("torch_build: cuda\n", "cuda", "nccl", "needs 2 GPUs for nccl (one per rank); 0 visible"),
        ("torch_build: cuda\n", "cuda", "gloo", None),
        ("", "cpu", "gloo", None),
    ],
)
def test_spec_gate_checks_the_build_first_then_the_gpus(tmp_path, monkeypatch, header, build, backend, reason):
    monkeypatch.setattr(gates, "running_torch", lambda: ("2.13.0+cpu", build))
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(name, raising=False)
    spec = load_spec(write(tmp_path, TINY_2.replace("tables:", header + "tables:")))
    assert gates.spec_gate(spec, backend, gpus=0) == reason


def test_a_ctrl_c_inside_the_torch_import_is_raised_after_it(monkeypatch):
    """The command line's first torch import is held: a Ctrl-C inside it once left numpy
    half-imported, and the next import failed with a traceback (benchmarks/soak_signals.py)."""
    import builtins
    import signal

    real_import = builtins.__import__
    finished = []

    def importing(name, *args, **kwargs):
        if name != "torch":
            return real_import(name, *args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # as if Ctrl-C landed inside the import
        module = real_import(name, *args, **kwargs)
        finished.append(name)
        return module

    monkeypatch.setattr(builtins, "__import__", importing)
    with pytest.raises(KeyboardInterrupt):
        gates.running_torch()
    assert finished == ["torch"]
