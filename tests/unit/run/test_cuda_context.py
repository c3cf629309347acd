"""The pre-flight's CUDA-context figure: measured once per GPU and torch, cached, else the fallback.

No GPU here: the measurement (a child process making a context on GPU 0) is replaced by a stub
that counts its calls; the cache file lives in a temporary ``FSDP2_HARNESS_CACHE``."""

from __future__ import annotations

import json

import pytest

from harness.run import cuda_context


@pytest.fixture()
def calls(tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP2_HARNESS_CACHE", str(tmp_path))
    monkeypatch.setattr(cuda_context, "_gpu_key", lambda: "gpu of 150000000000 B")
    return []


def stub(calls, figure):
    def measure():
        calls.append(figure)
        return None if figure is None else {"bytes": figure, "gpu": "H200", "total": 150 * 10**9, "torch": "2.11.0"}

    return measure


def test_measured_once_then_read_from_the_cache(calls, tmp_path):
    assert cuda_context.context_bytes("2.11.0+cu130", measure=stub(calls, 545_259_520)) == 545_259_520
    assert cuda_context.context_bytes("2.11.0+cu130", measure=stub(calls, 1)) == 545_259_520  # cached
    assert calls == [545_259_520]
    assert json.loads((tmp_path / "cuda_context.json").read_text()) == {
        "gpu of 150000000000 B, torch 2.11.0+cu130": 545_259_520
    }
    assert cuda_context.context_bytes("2.13.0+cu130", measure=stub(calls, 600_000_000)) == 600_000_000  # another torch


def test_without_a_figure_the_fallback_and_nothing_cached(calls, tmp_path, monkeypatch):
    assert cuda_context.context_bytes("2.11.0", measure=stub(calls, None)) == cuda_context.FALLBACK_BYTES
    assert not (tmp_path / "cuda_context.json").exists()
    monkeypatch.setattr(cuda_context, "_gpu_key", lambda: None)  # no GPU: nothing is measured
    assert cuda_context.context_bytes("2.11.0", measure=stub(calls, 7)) == cuda_context.FALLBACK_BYTES
    assert calls == [None]


def test_an_unreadable_cache_is_measured_again(calls, tmp_path):
    (tmp_path / "cuda_context.json").write_text("{not json")
    assert cuda_context.context_bytes("2.11.0", measure=stub(calls, 123_000_000)) == 123_000_000


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("FSDP2_HARNESS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cuda_context.cache_dir() == tmp_path / "fsdp2-harness"
