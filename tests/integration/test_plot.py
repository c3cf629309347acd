"""The memory timeline of a real walkthrough run (4 gloo ranks, shared with the spec's items) tells
the document's story (Steps 0 and 11: 4.72 MB unsharded while a layer computes, 1.18 MB of shards per layer)."""

from __future__ import annotations

from harness.load.spec import load_spec
from harness.report.plot import memory_timeline
from tests.support import WALKTHROUGH

# The document's ≈4.72 MB per layer and ≈1.18 MB per rank in fp16 (sections "参数列表（单层）" and
# "每个 rank 上的参数分片"): exact bytes of the walkthrough layer
# in fp16 (2,360,448 and 590,112 elements x 2 bytes, the document's parameter tables).
LAYER_BYTES, SHARD_BYTES = 4_720_896, 1_180_224


def test_real_timeline_tells_the_documents_story(spec_observation):
    spec = load_spec(WALKTHROUGH)
    obs = spec_observation(spec)
    for rank in obs["environment"]["observed_ranks"]:
        tl = memory_timeline(obs, rank)
        unsharded, sharded = tl.series["unsharded_param"], tl.series["sharded_param"]
        # one line per unit: each layer's own shards, 1.18 MB, summing to the tracker's total at every point
        assert tl.unit_shards == {"layers.0": SHARD_BYTES, "layers.1": SHARD_BYTES}
        assert all(s == sum(tl.unit_shards.values()) for s in sharded)
        # forward of each layer, then backward in reverse: 4.72 MB while it computes, 0 before and after
        assert [(u, phase) for u, phase, _, _ in tl.spans] == [
            ("layers.0", "forward"),
            ("layers.1", "forward"),
            ("layers.1", "backward"),
            ("layers.0", "backward"),
        ]
        for _, _, first, last in tl.spans:
            assert unsharded[first : last + 1] == [LAYER_BYTES] * (last - first + 1)
            assert unsharded[first - 1] == 0 and unsharded[last + 1] == 0
        assert tl.points[-1] == ("", "After Optimizer Step") and unsharded[-1] == 0
