"""A spec gated out whole (its ``torch_build`` or ``torch`` range excludes the running torch, or
its nccl run needs GPUs not here) is skipped before anything runs, with the reason naming the
torch that runs: ``run`` exits 0, ``render`` exits 0, the plugin's items skip (issue 44).

Every run here is watched by the no-ranks guard (tests/support/no_ranks/sitecustomize.py): a
rank process started anyway fails the test. ``emulated_cuda`` makes the subprocess's torch a
CUDA build as the gate sees it (``torch.version.cuda`` set; nothing else of CUDA), so the other
build's refusal is tested on this machine too (a real CUDA build: see the report of issue 44).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

# imported here, not in a test: pytester drops a torch imported inside one (test_pytest_plugin.py)
import torch

from tests.support import REPO
from tests.support.cli import cli, no_traceback
from tests.support.no_ranks import sitecustomize as no_ranks
from tests.support.specs import TINY_2
from tests.support.specs import write_spec as write

pytest_plugins = ["pytester"]

NO_RANKS = Path(no_ranks.__file__).resolve()

SITE = """\
import os, runpy
runpy.run_path({guard!r})  # the no-ranks guard: refuses rank processes, logs each to $FSDP2_TESTS_RANK_LOG
if os.environ.get("EMULATED_TORCH_CUDA"):
    import torch

    torch.version.cuda = os.environ["EMULATED_TORCH_CUDA"]  # what harness.run.gates reads
"""


def guarded(tmp_path: Path, cuda: str | None = None) -> tuple[dict[str, str], Path]:
    """The environment of a subprocess that refuses rank processes (and, with ``cuda``, whose
    torch reads as a CUDA build); the log file any refusal is written to."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITE.format(guard=str(NO_RANKS)), encoding="utf-8")
    log = tmp_path / "launched.txt"
    path = os.pathsep.join(filter(None, [str(site), str(REPO), os.environ.get("PYTHONPATH")]))
    env = {"PYTHONPATH": path, no_ranks.LOG: str(log)}
    if cuda:
        env["EMULATED_TORCH_CUDA"] = cuda
    return env, log


def no_rank_started(log: Path) -> None:
    assert not log.exists() or not log.read_text().strip(), log.read_text()


def spec_text(header: str, backend: str = "auto") -> str:
    return TINY_2.replace("tables:", f"backend: {backend}\n{header}tables:")


@pytest.mark.parametrize("backend", ["nccl", "auto"])
def test_a_cuda_spec_on_a_cpu_build_is_skipped_before_it_runs(tmp_path, backend):
    if torch.version.cuda is not None:
        pytest.skip("this torch is a CUDA build")
    env, log = guarded(tmp_path)
    path = write(tmp_path, spec_text("torch_build: cuda\n", backend))
    proc = cli("run", str(path), "--json", str(tmp_path / "out.json"), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reason = f"describes a cuda build of torch; running {torch.__version__}, a cpu build"
    assert f"tiny: skipped: {reason}" in proc.stdout
    assert "tiny: 0 passed, 0 failed, 1 skipped" in proc.stdout
    no_traceback(proc)
    no_rank_started(log)
    (result,) = json.loads((tmp_path / "out.json").read_text())["results"]
    assert result["status"] == "skip" and result["message"] == reason


def test_a_cpu_spec_on_a_cuda_build_is_skipped_before_it_runs(tmp_path):
    env, log = guarded(tmp_path, cuda="13.0")
    path = write(tmp_path, spec_text("torch_build: cpu\n", "gloo"))
    proc = cli("run", str(path), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tiny: skipped: describes a cpu build of torch; running " in proc.stdout
    assert ", a cuda build" in proc.stdout
    no_rank_started(log)


def test_a_torch_range_excluding_every_entry_skips_the_spec_under_run_repeat_and_render(tmp_path):
    env, log = guarded(tmp_path)
    path = write(tmp_path, spec_text('torch: "<2.0"\n', "gloo"))
    reason = f"tiny: skipped: requires torch <2.0; running {torch.__version__}"
    for args, stream in ((("run",), "stdout"), (("run", "--repeat", "2"), "stdout"), (("render",), "stderr")):
        proc = cli(*args, str(path), env=env)
        assert proc.returncode == 0, (args, proc.stdout + proc.stderr)
        assert reason in getattr(proc, stream), (args, proc.stdout + proc.stderr)
        no_traceback(proc)
    no_rank_started(log)


def test_a_spec_gated_out_and_one_that_fails_to_load_exit_2_for_the_second_only(tmp_path):
    env, log = guarded(tmp_path, cuda="13.0")
    gated = write(tmp_path, spec_text("torch_build: cpu\n"), "gated.yaml")
    proc = cli("run", str(gated), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec: broken\n", encoding="utf-8")
    proc = cli("run", str(gated), str(broken), env=env)
    assert proc.returncode == 2 and "broken.yaml" in proc.stdout + proc.stderr
    no_rank_started(log)


@pytest.mark.parametrize("cuda, header", [(None, "torch_build: cuda\n"), ("13.0", "torch_build: cpu\n")])
def test_the_plugin_skips_a_spec_of_the_other_build_without_running_it(pytester, monkeypatch, tmp_path, cuda, header):
    env, log = guarded(tmp_path, cuda)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    pytester.mkdir("specs")
    (pytester.path / "specs" / "other_build.yaml").write_text(spec_text(header, "nccl"), encoding="utf-8")
    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    other = "cuda" if cuda else "cpu"
    result.stdout.fnmatch_lines([f"*describes a {header.split()[1]} build of torch; running *, a {other} build*"])
    no_rank_started(log)
