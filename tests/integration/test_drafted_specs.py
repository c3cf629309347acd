"""Drafted specs run end to end: a released config at 128 simulated ranks, a transformers config.json
on 3 real gloo ranks, a published config.json at 64 simulated ranks; every drafted entry passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.judge.evaluate import FAILING, evaluate_spec
from harness.load.spec import load_spec
from tests.support import REPO


def _draft(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "drafted.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "draft", *args, "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
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
def test_drafted_spec_from_a_transformers_config_json_on_real_ranks(tmp_path, spec_observation):
    # the config, written by transformers itself; an uneven world (3 ranks), real gloo ranks
    transformers = pytest.importorskip("transformers")
    config = tmp_path / "config.json"
    transformers.Qwen3Config(
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=768,
        num_hidden_layers=4,
        vocab_size=1000,
        tie_word_embeddings=True,
        dtype="float32",
    ).to_json_file(str(config))
    path = _draft(tmp_path, "--config", str(config), "--world-size", "3")
    text = path.read_text()
    assert "# model dtype float32: the config file's dtype." in text  # transformers 5 writes dtype, not torch_dtype
    spec = load_spec(path)
    assert spec.raw["setup"]["model"]["config"] == "config.json"  # relative to the drafted spec
    assert spec.backend == "auto" and spec.setup.world_size == 3 and spec.setup.model.dtype == "float32"
    results = evaluate_spec(spec, spec_observation(spec))
    assert [r.explain() for r in results if r.status in FAILING] == []
    assert {r.status for r in results} == {"pass"}


@pytest.mark.slow
def test_drafted_spec_from_a_released_config_json_on_the_fake_backend(tmp_path, spec_observation):
    transformers = pytest.importorskip("transformers")
    from model.config import KNOWN_CONFIGS

    folder = tmp_path / "Qwen3-8B"
    folder.mkdir()
    transformers.Qwen3Config(**KNOWN_CONFIGS["Qwen3-8B"].to_transformers_kwargs(), dtype="bfloat16").to_json_file(
        str(folder / "config.json")
    )
    path = _draft(tmp_path, "--config", str(folder / "config.json"), "--world-size", "64")
    spec = load_spec(path)
    assert spec.backend == "fake" and spec.setup.model.dtype == "bfloat16" and spec.name == "qwen3_8b_w64"
    results = evaluate_spec(spec, spec_observation(spec))
    assert [r.explain() for r in results if r.status in FAILING] == []
    assert {r.status for r in results} == {"pass"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        pytest.param(
            (
                "--config",
                "walkthrough",
                "--world-size",
                "4",
                "--dtype",
                "float32",
                "--param-dtype",
                "bfloat16",
                "--reduce-dtype",
                "float32",
                "--reshard-after-forward",
                "layers.1=false",
            ),
            id="gloo-fp32-stored-bf16-computed-layer1-kept",
        ),
        pytest.param(
            (
                "--config",
                "Qwen3-1.7B",
                "--world-size",
                "6",
                "--backend",
                "fake",
                "--param-dtype",
                "bfloat16",
                "--reduce-dtype",
                "float32",
                "--reshard-after-forward",
                "layers.1=false",
            ),
            id="fake-issue-41-padded-layer1-kept",
        ),
        pytest.param(
            (
                "--config",
                "walkthrough",
                "--world-size",
                "8",
                "--layers",
                "3",
                "--backend",
                "fake",
                "--reshard-after-forward",
                "layers.0=false",
                "--reshard-after-forward",
                "layers.2=2",
            ),
            id="fake-layer0-kept-layer2-to-2-ranks",
        ),
    ],
)
def test_a_drafted_policy_reshard_and_memory_pass_when_run(tmp_path, spec_observation, args):
    """The doc author's options (issue 41): every drafted entry, memory included, holds in a run."""
    spec = load_spec(_draft(tmp_path, *args))
    assert any(item.entry.check == "memory" for item in spec.items)
    results = evaluate_spec(spec, spec_observation(spec))
    assert [r.explain() for r in results if r.status in FAILING] == []
    assert {r.status for r in results} == {"pass"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ("--config", "walkthrough", "--world-size", "4", "--tp", "2", "--dtype", "float32"),  # real gloo ranks
        ("--config", "Qwen3-8B", "--world-size", "64", "--tp", "8"),  # simulated, an 8 x 8 mesh
        ("--config", "walkthrough", "--world-size", "4", "--tp", "2", "--sequence-parallel", "--dtype", "float32"),
    ],
    ids=["walkthrough_2x2_gloo", "qwen3_8b_8x8_fake", "walkthrough_2x2_sequence_parallel"],
)
def test_a_drafted_fsdp_over_tp_spec_passes(tmp_path, spec_observation, args):
    path = _draft(tmp_path, *args)
    spec = load_spec(path)
    assert spec.setup.tensor_parallel is not None and spec.setup.mesh_dim_names == ("dp", "tp")
    results = evaluate_spec(spec, spec_observation(spec))
    assert [r.explain() for r in results if r.status in FAILING] == []
    assert {r.status for r in results} == {"pass"}
