"""Installed as a user would: ``pip install .`` into a fresh virtual environment outside the
checkout, then ``pytest my_specs/my_spec.yaml`` in another folder collects and runs the spec
through the pytest11 entry point (no conftest.py, no checkout on the path)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support import REPO

SPEC = """\
spec: my_layer
title: one walkthrough layer on 2 simulated ranks
document: my own notes
backend: fake
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 1}}
  mesh: {shape: [2], dim_names: [dp]}
tables:
  - section: "Shards"
    check: param
    with: {layer: 0}
    columns: [param, local_shape]
    rows:
      - [mlp.gate_proj.weight, [512, 512]]
      - [self_attn.q_norm.weight, [32]]
"""


@pytest.mark.slow
def test_pip_install_then_pytest_a_spec_elsewhere(tmp_path):
    # a copy of what a release holds, so the build writes nothing into the checkout
    source = tmp_path / "source"
    for name in ("harness", "model"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)

    venv = tmp_path / "venv"
    # without pip of its own (ensurepip takes seconds): this environment's pip reaches it through the .pth below
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # torch, pytest and the other dependencies come from this environment (installing torch again
    # would take minutes); this package itself only from the fresh install below
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "deps_from_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # built by this environment's setuptools (the fresh venv's may predate pyproject support)
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-q",
            "-w",
            str(wheels),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = wheels.glob("fsdp2_conformance-*.whl")
    # without PYTHONPATH: a checkout on it shows pip this package's egg-info as installed already
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean,
    )
    assert install.returncode == 0, install.stdout + install.stderr

    work = tmp_path / "elsewhere"
    (work / "my_specs").mkdir(parents=True)
    (work / "my_specs" / "my_spec.yaml").write_text(SPEC, encoding="utf-8")
    proc = subprocess.run(
        [str(python), "-m", "pytest", "my_specs/my_spec.yaml", "-v", "-p", "no:cacheprovider"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "my_specs/my_spec.yaml::Shards::mlp.gate_proj.weight PASSED" in out, out
    assert "2 passed" in out
    where = subprocess.run(
        [str(python), "-c", "import harness; print(harness.__file__)"],
        cwd=work,
        capture_output=True,
        text=True,  # as pytest ran: no PYTHONPATH naming the checkout
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    ).stdout
    assert where.startswith(site), where  # the installed copy ran, not the checkout
