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


# --- every unit, totals as each layer sends, the policy, memory, English headings -----------


def _layer1_keeps_its_parameters():
    """The walkthrough with layers.1 kept unsharded after forward (reshard_after_forward=False):
    its backward needs no all-gather, so it sends 2 × 3.54 MB a step where layers.0 sends 3 ×."""
    obs = walkthrough_observation()
    for rank in obs["ranks"]:
        rank["collectives"] = [
            c
            for c in rank["collectives"]
            if not (c["unit"] == "layers.1" and c["phase"] == "backward" and c["op"] == "all_gather")
        ]
    return obs


def test_the_step_total_adds_what_each_layer_sends():
    """It printed "For N_L = 2 layers: 2 × 336 MB ≈ 672 MB" beside the step's true 588 MB."""
    text = render_markdown(load_spec(WALKTHROUGH), _layer1_keeps_its_parameters())
    assert "For N_L = 2 layers: 10.6 MB + 7.08 MB ≈ 17.7 MB (17,703,360 B) per rank." in text
    assert "2 × 10.6 MB" not in text
    assert "All collectives of the step on this rank send 17.7 MB (17,703,360 B)." in text


def test_units_that_differ_get_tables_of_their_own():
    text = render_markdown(load_spec(WALKTHROUGH), _layer1_keeps_its_parameters())
    for heading in ("## Backward (`layers.0`)", "## Backward (`layers.1`)", "## Communication of one layer per step"):
        assert heading in text, heading
    assert "| **one layer, one step** |  | 7.08 MB (7,081,344 B) |" in text
    # what the layers share stays one table
    assert "## Parameters of one layer (each of `layers.0`, `layers.1`)" in text


class _Spec:
    """A spec whose tables cite none of the walkthrough's sections."""

    name, title, document = "mine", "my spec", "my notes"
    raw = {"tables": [{"section": "my section", "check": "step", "entries": []}]}


def test_headings_are_english_and_cite_the_walkthrough_only_for_its_specs():
    import re

    mine = render_markdown(_Spec(), walkthrough_observation())
    assert not re.search(r"[\u4e00-\u9fff]", mine), [
        ln for ln in mine.splitlines() if re.search(r"[\u4e00-\u9fff]", ln)
    ]
    assert "Document section:" not in mine
    walkthrough = render_markdown(load_spec(WALKTHROUGH), walkthrough_observation())
    assert (
        "## Parameters of one layer (each of `layers.0`, `layers.1`)\n\nDocument section: 参数列表（单层）"
        in walkthrough
    )


def test_the_mixed_precision_policy_of_each_unit():
    obs = walkthrough_observation()
    for unit in obs["fsdp_units"]:
        if unit["params"]:
            unit["state"] = {"param_dtype": "bfloat16", "reduce_dtype": "float32", "output_dtype": None}
    text = render_markdown(load_spec(WALKTHROUGH), obs)
    assert "## Mixed precision" in text
    assert "| `layers.1` | bfloat16 | float32 | none | float16 | float16 | none observed |" in text
    plain = render_markdown(load_spec(WALKTHROUGH), walkthrough_observation())  # no unit state recorded
    assert "| `layers.0` | not recorded | not recorded | not recorded | float16 | float16 |" in plain


def test_memory_by_category_at_each_snapshot():
    text = render_markdown(load_spec(WALKTHROUGH), walkthrough_observation())
    memory = text.split("## Memory", 1)[1].split("\n## ", 1)[0]
    assert "| unit | state | Sharded Param | Unsharded Param | Sharded Grad | OptState |" in memory
    assert "| `layers.0` | After Pre-Forward | 2.36 MB | 4.72 MB | 0 | 0 |" in memory
    assert "| the root | After Optimizer Step | 2.36 MB | 0 | 2.36 MB | 4.72 MB |" in memory
