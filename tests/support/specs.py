"""Spec texts the tests use as bases, and writing a spec into a test's folder."""

from __future__ import annotations

from pathlib import Path

# one walkthrough layer pair on 4 real ranks with one step entry (the smallest runnable spec)
TINY = """\
spec: tiny
title: a tiny spec
document: a document
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 2}}
  mesh: {shape: [4], dim_names: [dp]}
tables:
  - section: "Forward"
    title: shapes
    check: step
    entries:
      - {id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}
"""
# the same on the fake backend: simulated in this process, no rank launched
TINY_FAKE = TINY.replace("tables:", "backend: fake\ntables:")

# model overrides small enough for a real step in well under a second per rank
TINY_DIMS = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16}


def write_spec(folder: Path, data: str | bytes, name: str = "spec.yaml") -> Path:
    """Write ``data`` (text as UTF-8, or bytes as they are) to ``folder/name``; returns the path."""
    path = folder / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path
