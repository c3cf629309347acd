"""What the loader lets an entry select (harness/load/spec.py ``_context``): parameters of a tied
embedding, by where the setup puts its two users."""

from __future__ import annotations

import pytest

from harness.load.spec import SpecError, load_spec
from tests.support import REPO

SPEC = """\
spec: tie
title: "a tied embedding"
document: "test"
setup:
  model:
    config: walkthrough
    overrides: {{num_hidden_layers: 1, hidden_size: 64, intermediate_size: 128, num_attention_heads: 4,
                num_key_value_heads: 2, head_dim: 16, vocab_size: 128, tie_word_embeddings: {tie}}}
    body: causal_lm
  mesh: {{shape: [2], dim_names: [dp]}}
  fsdp:
    units: {units}
tables:
  - section: s
    title: t
    check: param
    entries:
      - {{id: head, fqn: lm_head.weight, full_shape: [128, 64]}}
"""


@pytest.mark.parametrize(
    "tie, units, loads",
    [
        (True, "[model.embed_tokens, model.layers.*, lm_head]", True),  # two units: the tie is broken
        (True, "[model.embed_tokens, model.layers.*]", True),  # lm_head left to the root: broken too
        (True, "[[model.embed_tokens, lm_head], model.layers.*]", False),  # one unit: one tied weight
        (True, "[model.layers.*]", False),  # both in the root: one tied weight, named model.embed_tokens.weight
        (False, "[model.layers.*]", True),  # untied: lm_head.weight always exists
    ],
)
def test_lm_head_weight_is_a_parameter_where_the_tie_is_broken(tmp_path, tie, units, loads):
    path = tmp_path / "tie.yaml"
    path.write_text(SPEC.format(tie=str(tie).lower(), units=units))
    if loads:
        assert [item.entry.id for item in load_spec(path).items] == ["head"]
    else:
        with pytest.raises(SpecError, match="has no parameter 'lm_head.weight'"):
            load_spec(path)


def test_the_shipped_split_units_spec_names_lm_head_weight():
    spec = load_spec(REPO / "specs" / "tied_embeddings_split_units.yaml")
    assert any(item.entry.selectors.get("fqn") == "lm_head.weight" for item in spec.items)
