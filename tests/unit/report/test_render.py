"""``harness render``: the walkthrough document's tables, regenerated from the synthetic observation.

The document's figures, typed from it table by table, and the search for each on its row are in
``tests/support/document_tables.py``; a real run's page: ``tests/integration/test_render.py``.
"""

from __future__ import annotations

import copy

import pytest

from harness.load.spec import load_spec
from harness.report.figures import approx_count, mb, mb_exact, sig3, thousands
from harness.report.render import render_markdown
from tests.support import WALKTHROUGH
from tests.support.document_tables import missing_figures
from tests.support.observations import rank_doc, walkthrough_observation

# --- figures in the document's units ------------------------------------------------------


@pytest.mark.parametrize(
    "value, text",
    [
        (2_360_448, "≈2.36M"),
        (590_112, "≈590K"),
        (10_622_016 / 1e6, "10.6"),
        (999, "999"),
    ],
)
def test_counts_and_significant_digits(value, text):
    assert (approx_count(value) if isinstance(value, int) else sig3(value)) == text


@pytest.mark.parametrize(
    "n_bytes, text",
    [
        (4_720_896, "4.72 MB"),
        (1_180_224, "1.18 MB"),
        (3_540_672, "3.54 MB"),
        (10_622_016, "10.6 MB"),
        (16_384, "0.0164 MB"),
        (0, "0 MB"),
        (9_441_792_000, "9.44 GB"),
    ],
)
def test_mb_is_ten_to_the_sixth_bytes(n_bytes, text):
    assert mb(n_bytes) == text


def test_exact_figure_beside_the_rounded_one():
    assert mb_exact(4_720_896) == "4.72 MB (4,720,896 B)"
    assert thousands(3_540_672.0) == "3,540,672"


# --- the walkthrough, regenerated ---------------------------------------------------------


def test_synthetic_walkthrough_holds_every_document_figure():
    """Without launching ranks: the observation a faithful run would record (tests/support/observations.py)."""
    text = render_markdown(load_spec(WALKTHROUGH), walkthrough_observation())
    assert missing_figures(text) == []


def test_a_wrong_observation_is_caught_on_its_row():
    """A shard that differs on one rank gets its own table, and the check names that row."""
    obs = walkthrough_observation()
    for p in rank_doc(obs, 2)["params"]:
        if p["fqn"] == "layers.0.self_attn.q_proj.weight":
            p["local_shape"], p["local_numel"] = [129, 512], 66_048
    problems = missing_figures(render_markdown(load_spec(WALKTHROUGH), obs))
    assert problems and all("q_proj.weight" in p or "≈590K" in p for p in problems), problems
    assert any("[128, 512]" in p and "[129, 512]" in p for p in problems), problems


def test_render_is_pure():
    obs = walkthrough_observation()
    before = copy.deepcopy(obs)
    spec = load_spec(WALKTHROUGH)
    assert render_markdown(spec, obs) == render_markdown(spec, obs)
    assert obs == before
