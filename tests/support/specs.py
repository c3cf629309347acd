"""Spec texts the tests use as bases, and writing a spec into a test's folder."""

from __future__ import annotations

import subprocess
import time
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
# and on 2 ranks without the replica reference and the memory tracker: half the ranks (or
# simulation: about 1.4 s a rank on 2 cores) and less of each, for the tests that read a run's
# outputs (its summary, its results), not its world, its numerics or its memory
LEAN = "  numerics: false\n  track_memory: false\n"
TINY_2 = TINY.replace("shape: [4]", "shape: [2]").replace("  mesh:", LEAN + "  mesh:")
TINY_FAKE_2 = TINY_2.replace("tables:", "backend: fake\ntables:")

# Ranks that wait in step 1 until a signal ends them: the spec's before_step hook (WAITING_HOOKS,
# written beside it by write_waiting_spec) touches <folder>/rank<r>.waiting, then sleeps. A signal
# sent once every rank's file exists (wait_for_waiting_ranks) lands inside the run on any machine,
# fast or slow; the sleep bounds a run nobody signals. BACKEND and SECONDS are placeholders.
WAITING = TINY_2.replace("  mesh:", "  hooks: {file: waiting_hooks.py, before_step: wait}\n  mesh:").replace(
    "tables:", "backend: BACKEND\ntables:"
)
WAITING_HOOKS = """\
import time
from pathlib import Path


def wait(model, step_index, rank, world_size):
    Path(__file__).with_name(f"rank{rank}.waiting").touch()
    time.sleep(SECONDS)
"""


def write_waiting_spec(folder: Path, backend: str = "gloo", name: str = "two.yaml", seconds: float = 120) -> Path:
    """Write :data:`WAITING` on ``backend`` as ``folder/name`` (its ``spec:`` the file's stem) and
    its hooks file, whose ranks sleep ``seconds`` at the start of step 1; returns the spec's path."""
    (folder / "waiting_hooks.py").write_text(WAITING_HOOKS.replace("SECONDS", repr(seconds)))
    text = WAITING.replace("BACKEND", backend).replace("spec: tiny", f"spec: {Path(name).stem}")
    return write_spec(folder, text, name)


def wait_for_waiting_ranks(folder: Path, ranks: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Return once ranks ``0..ranks-1`` of a :func:`write_waiting_spec` run in ``folder`` wait in
    their step.

    Raises:
        AssertionError: ``proc`` ended first (with its output), or ``timeout`` seconds passed.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all((folder / f"rank{r}.waiting").exists() for r in range(ranks)):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"the ranks were not all waiting in their step after {timeout} s")


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
