"""The pytest plugin on a spec that cannot run here: it skips, saying why."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent

NCCL_SPEC = """\
spec: needs_gpus
title: a spec for 4 GPUs
document: a document
backend: nccl
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 1}}
  mesh: {shape: [4], dim_names: [dp]}
tables:
  - section: "Forward"
    title: shapes
    check: step
    entries:
      - {id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}
      - {id: q_heads, step: step2.q_heads, shape: [2, 8, 8, 64]}
"""


def test_nccl_spec_without_enough_gpus_skips_with_the_reason(pytester, monkeypatch):
    import torch

    if torch.cuda.device_count() >= 4:
        pytest.skip("this machine has 4 GPUs: the spec would run")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    pytester.mkdir("specs")
    (pytester.path / "specs" / "needs_gpus.yaml").write_text(NCCL_SPEC, encoding="utf-8")
    result = pytester.runpytest_subprocess("-p", "conftest", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*needs 4 GPUs for nccl (one per rank); * visible*"])
