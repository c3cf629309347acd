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
# and on 2 ranks: half the ranks (or simulation: about 1.4 s a rank on 2 cores), for the tests
# that read a run's outputs, not its world
TINY_2 = TINY.replace("shape: [4]", "shape: [2]")
TINY_FAKE_2 = TINY_FAKE.replace("shape: [4]", "shape: [2]")

# Two real ranks whose step lasts seconds of CPU even on an idle machine (6 fp16 layers, B=4,
# L=128): a signal sent 2 s after the ranks start lands inside the step. BACKEND is a placeholder.
SIGNAL_WINDOW = """\
spec: two
title: two ranks
document: a document
backend: BACKEND
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 6}}
  mesh: {shape: [2], dim_names: [dp]}
  batch_per_rank: 4
  seq_len: 128
  numerics: false
tables:
  - section: "Forward"
    title: shapes
    check: step
    entries:
      - {id: x_norm, step: step1.x_norm, shape: [4, 128, 512]}
"""

# model overrides small enough for a real step in well under a second per rank
TINY_DIMS = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}


def write_spec(folder: Path, data: str | bytes, name: str = "spec.yaml") -> Path:
    """Write ``data`` (text as UTF-8, or bytes as they are) to ``folder/name``; returns the path."""
    path = folder / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


# A small valid spec (4 ranks; step, param and params_total entries); each loader case changes it in
# one place (edit). Line numbers are looked up by marker, so the cases stay right when this text changes.
SMALL = """\
spec: tiny
title: a tiny spec
document: a document
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 2}}
  seed: 0
  mesh: {shape: [4], dim_names: [dp]}
tables:
  - section: "Forward"
    title: shapes
    check: step
    entries:
      - {id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}
      - {id: k_heads, step: step2.k_heads, shape: [2, 8, 4, 64]}
  - section: "Shards"
    title: shard per rank
    check: param
    with: {layer: 0}
    columns: [param, local_shape, local_numel]
    rows:
      - [self_attn.q_proj.weight, [128, 512], 65536]
      - [self_attn.k_proj.weight, [64, 512], 32768]
  - section: "Totals"
    check: params_total
    entries:
      - id: layer_bytes
        layer: 0
        bytes: "4.72 MB"
"""


def line_of(text: str, marker: str) -> int:
    """The 1-based line of ``text`` holding ``marker`` (which must occur on one line only)."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if marker in line]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


def edit(old: str, new: str, base: str = SMALL) -> str:
    """``base`` with ``old``, which must occur once, replaced by ``new``."""
    assert base.count(old) == 1, old
    return base.replace(old, new)
