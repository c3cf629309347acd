"""Extension points on real ranks: a hook that raises fails the run in one line naming the rank and
the hook; the shipped hooks spec itself runs as spec items (specs/hooks_unfreeze_layer0.yaml)."""

from __future__ import annotations

import pytest

from harness.load.spec import load_spec
from harness.run.launch.errors import RunError
from harness.run.launch.local import run_local
from tests.support.specs import TINY_DIMS, write_spec

SPEC = f"""\
spec: hooks_fail
title: a hook that raises
document: a document
setup:
  model: {{config: walkthrough, overrides: {TINY_DIMS}, body: decoder_layers, dtype: float32}}
  mesh: {{shape: [2], dim_names: [dp]}}
  track_memory: false
  numerics: false
  hooks: {{file: h.py, after_fully_shard: check_unit}}
tables:
  - section: S
    check: custom
    entries:
      - {{id: e, x: 1}}
"""


@pytest.mark.slow
def test_a_raising_hook_fails_the_run_naming_rank_and_hook(tmp_path):
    (tmp_path / "h.py").write_text(
        "def check_unit(model, unit, module, rank, world_size):\n"
        "    if rank == 1 and unit == 'layers.1':\n"
        "        raise ValueError(f'refused {unit}')\n"
    )
    spec = load_spec(write_spec(tmp_path, SPEC))
    with pytest.raises(RunError) as err:
        run_local(spec.setup, backend="gloo", timeout_s=120)
    text = str(err.value)
    assert "rank 1" in text and "setup.hooks.after_fully_shard (check_unit in" in text
    assert "ValueError: refused layers.1" in text


MICROBATCH_SPEC = f"""\
spec: hooks_microbatch
title: microbatch hooks on the reference too
document: a document
setup:
  model: {{config: walkthrough, overrides: {TINY_DIMS}, body: decoder_layers, dtype: float32}}
  mesh: {{shape: [2], dim_names: [dp]}}
  track_memory: false
  hooks: {{file: h.py, before_microbatch: only_last_trains_layer1, loss: doubled}}
  schedule:
    steps:
      - {{microbatches: 2, gradient_sync: every}}
tables:
  - section: S
    check: numerics
    entries:
      - {{id: e, grads_count: 22}}
"""

MICROBATCH_HOOKS = """\
def only_last_trains_layer1(model, step_index, microbatch, rank, world_size):
    for name, p in model.named_parameters():
        if name.startswith("layers.1."):
            p.requires_grad_(microbatch == 1)


def doubled(output, inputs):
    return 2 * output.float().pow(2).mean()
"""


@pytest.mark.slow
def test_microbatch_and_loss_hooks_run_on_the_reference_too(tmp_path):
    (tmp_path / "h.py").write_text(MICROBATCH_HOOKS)
    spec = load_spec(write_spec(tmp_path, MICROBATCH_SPEC))
    for result in run_local(spec.setup, backend="gloo", timeout_s=120):
        numerics = result["entry"]["numerics"]
        worst = max(g["max_abs_diff"] / (g["max_abs_ref"] or 1) for g in numerics["grads"])
        assert len(numerics["grads"]) == 22 and worst <= 1e-5, numerics
        assert numerics["loss"]["max_abs_diff"] <= 1e-6
