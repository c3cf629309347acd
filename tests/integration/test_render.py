"""Render's page from a real walkthrough run (4 gloo ranks, shared with the spec's items): every
document figure, and the shipped page docs/qwen3_walkthrough.md as render writes it today."""

from __future__ import annotations

from harness.load.spec import load_spec
from harness.report.render import render_markdown
from tests.support import REPO as ROOT
from tests.support import WALKTHROUGH
from tests.support.document_tables import missing_figures


def test_real_walkthrough_run_holds_every_document_figure(spec_observation):
    """The real run (4 gloo ranks, shared with the spec's items in this session)."""
    spec = load_spec(WALKTHROUGH)
    text = render_markdown(spec, spec_observation(spec, every=True))
    assert missing_figures(text) == []


def _without_environment(markdown: str) -> list[str]:
    """The page's lines with the run's environment (torch version, backend, device) cut from its
    header line: the rest follows from the spec and FSDP2 alone."""
    return [ln.split(": torch ", 1)[0] if ln.startswith("The tables of ") else ln for ln in markdown.splitlines()]


def test_the_readme_excerpt_is_what_render_writes_now(spec_observation):
    """docs/qwen3_walkthrough.md, linked from docs/seeing-the-run.md as render's output, is what render writes
    for a real walkthrough run today (scripts/see_walkthrough regenerates it). It had drifted once:
    its header still named the document with a path the spec no longer carries."""
    spec = load_spec(WALKTHROUGH)
    docs = (ROOT / "docs" / "qwen3_walkthrough.md").read_text(encoding="utf-8")
    assert _without_environment(docs) == _without_environment(render_markdown(spec, spec_observation(spec, every=True)))


LAYER1_KEEPS = """\
spec: layer1_keeps
title: layer 1 keeps its parameters after forward
document: issue 41
backend: fake
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 2}, body: decoder_layers, dtype: bfloat16}
  mesh: {shape: [4], dim_names: [dp]}
  numerics: false
  fsdp:
    mixed_precision: {param_dtype: bfloat16, reduce_dtype: float32}
    units: [layers.0, {modules: layers.1, reshard_after_forward: false}]
tables:
  - section: mine
    title: reduce in fp32
    check: collectives
    entries:
      - {id: rs, select: {op: reduce_scatter}, dtype: float32}
"""


def test_a_layer_kept_after_forward_is_counted_as_it_sends(tmp_path, spec_observation):
    """A real (simulated) run: layers.1 skips its backward all-gather, so the step sends what each
    layer sends, not N_L times layer 0's; the policy and memory sections show, in English."""
    path = tmp_path / "layer1_keeps.yaml"
    path.write_text(LAYER1_KEEPS, encoding="utf-8")
    spec = load_spec(path)
    text = render_markdown(spec, spec_observation(spec, every=True))
    # bf16 all-gathers 3/4 × 4,720,896 B, fp32 reduce-scatters 3/4 × 9,441,792 B: layers.0 sends
    # 3,540,672 × 2 + 7,081,344 = 14,162,688 B, layers.1 (no backward all-gather) 10,622,016 B
    assert "For N_L = 2 layers: 14.2 MB + 10.6 MB ≈ 24.8 MB (24,784,704 B) per rank." in text, text
    assert "| `layers.1` | bfloat16 | float32 | none | bfloat16 | float32 | bfloat16 |" in text
    assert "## Memory" in text and "| `layers.1` | After Post-Forward |" in text
    assert "Document section:" not in text
