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
    text = render_markdown(spec, spec_observation(spec))
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
    assert _without_environment(docs) == _without_environment(render_markdown(spec, spec_observation(spec)))
