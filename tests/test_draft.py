"""A spec drafted for a config that is not shipped runs green with no hand edits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.judge.evaluate import FAILING, evaluate_spec
from harness.load.spec import load_spec

REPO = Path(__file__).resolve().parents[1]


def _draft(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "drafted.yaml"
    proc = subprocess.run([sys.executable, "-m", "harness", "draft", *args, "-o", str(out)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow
def test_drafted_qwen3_14b_at_128_ranks_passes(tmp_path, spec_observation):
    path = _draft(tmp_path, "--config", "Qwen3-14B", "--world-size", "128")
    spec = load_spec(path)
    assert spec.backend == "fake" and spec.setup.world_size == 128
    assert spec.items and all(item.drafted for item in spec.items)
    results = evaluate_spec(spec, spec_observation(spec))
    assert [r.explain() for r in results if r.status in FAILING] == []
    assert {r.status for r in results} == {"pass"}


@pytest.mark.slow
def test_drafted_spec_from_a_config_file_on_real_ranks(tmp_path, spec_observation):
    # an uneven world (3 ranks) from a config file, run on real gloo ranks
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 200, "num_hidden_layers": 4, "vocab_size": 64, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "tie_word_embeddings": False}))
    path = _draft(tmp_path, "--config", str(config), "--world-size", "3", "--dtype", "float32")
    spec = load_spec(path)
    assert spec.backend == "auto" and spec.setup.world_size == 3
    results = evaluate_spec(spec, spec_observation(spec))
    assert [r.explain() for r in results if r.status in FAILING] == []


def test_draft_rejects_an_unknown_config(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness", "draft", "--config", "Qwen3-15B", "--world-size", "8"],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode != 0
    assert "Qwen3-15B" in proc.stderr and "Qwen3-14B" in proc.stderr and "Traceback" not in proc.stderr
