"""The simulated backend's set-up: ``fully_shard`` outside ``FakeTensorMode``, the same document.

``harness.run.rank.fake`` shards a model without data (on ``meta``, or on untouched CPU storage
when the rank's shard is small) outside ``FakeTensorMode`` and gives it fake storage after;
which storage it picks must not show in the observation. The per-rank timings of a simulation
are benchmarks (benchmarks/bench_fake.py), not tests.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import model as qwen3
from harness.load.spec import load_spec
from harness.run.rank import fake
from harness.run.runner import run_setup
from tests.support import SPECS


def _without_timings(doc: dict) -> dict:
    return {**doc, "ranks": [{k: v for k, v in r.items() if k != "timings_s"} for r in doc["ranks"]]}


# the tied embedding (to_empty unties it), and the rank of uneven_3_ranks that holds fewer rows
@pytest.mark.parametrize("spec, rank", [("whole_model.yaml", 0), ("uneven_3_ranks.yaml", 2)])
def test_storage_for_sharding_does_not_show_in_the_observation(spec, rank, monkeypatch):
    # memory tracked even where the spec turns it off: the sharded bytes are where storage would show
    setup = dataclasses.replace(load_spec(SPECS / spec).setup, observe_ranks=(rank,), track_memory=True)
    on_cpu = run_setup(setup, backend="fake")
    monkeypatch.setattr(fake, "LAZY_SHARD_BYTES", -1)  # every model sharded from meta
    on_meta = run_setup(setup, backend="fake")
    assert _without_timings(on_meta) == _without_timings(on_cpu)


def test_storage_for_sharding_by_the_rank_shard_size():
    config = qwen3.get_config("walkthrough", num_hidden_layers=1, tie_word_embeddings=True)
    small = qwen3.Qwen3ForCausalLM(config, device=torch.device("meta"), dtype=torch.float16)
    assert fake.storage_for_sharding(small, 4) == "cpu"
    assert {p.device.type for p in small.parameters()} == {"cpu"}
    assert small.lm_head.weight is small.model.embed_tokens.weight  # tied again after to_empty
    big = qwen3.Qwen3DecoderStack(
        qwen3.get_config("Qwen3-32B", num_hidden_layers=1), device=torch.device("meta"), dtype=torch.bfloat16
    )  # 975 MB: a 2-rank shard is over the limit
    assert fake.storage_for_sharding(big, 2) == "meta"
    assert {p.device.type for p in big.parameters()} == {"meta"}
    assert fake.storage_for_sharding(big, 1024) == "cpu"


def test_reshard_after_forward_int_simulates():
    """``reshard_after_forward=2`` builds a sub-mesh in ``fully_shard``: outside FakeTensorMode."""
    setup = load_spec(SPECS / "reshard_after_forward_int.yaml").setup
    doc = run_setup(dataclasses.replace(setup, observe_ranks=(0, 3)), backend="fake")
    backward_gathers = [
        c for c in doc["ranks"][0]["collectives"] if c["phase"] == "backward" and c["op"] == "all_gather"
    ]
    assert backward_gathers and {c["group_size"] for c in backward_gathers} == {2}


def test_the_last_rank_of_an_uneven_shard_holds_what_the_others_hold():
    """uneven_3_ranks: rank 2 holds fewer rows, but FSDP2 pads every shard to the same size, so
    its memory is rank 0's at every snapshot (as on gloo ranks). FSDP's lazy init re-padded a
    fake shard under the tracker, which counted rank 2's shards as activations instead."""
    setup = dataclasses.replace(load_spec(SPECS / "uneven_3_ranks.yaml").setup, observe_ranks=(0, 2), track_memory=True)
    first, last = run_setup(setup, backend="fake")["ranks"]
    assert last["memory"] == first["memory"]
    before = [m for m in last["memory"] if (m["module"], m["state"]) == ("layers.0", "Before Pre-Forward")]
    assert before[0]["unrounded_bytes"]["sharded_param"] == 3_155_464  # both layers' padded fp16 shards
