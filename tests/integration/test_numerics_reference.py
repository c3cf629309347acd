"""``numerics_reference: rank_0``: one replica on rank 0 gives every rank the reference the
per-rank replicas give.

Both runs of a case build the same weights (``init: meta`` fills each rank's shards with a full
init's values; ``init: full`` builds the same full model) and inputs; the FSDP step is the same, so each rank's comparison must come out the
same: the forward output and loss bit for bit (the same chunk through the same kernels), the
gradient rows to float32 rounding (rank 0 adds the chunks' gradients in rank order; the
all-reduce sums them in gloo's order).
"""

from __future__ import annotations

import pytest

from harness.load.setup import RunSetup
from harness.run.runner import run_setup

MESHED = {"model": {"overrides": {"num_hidden_layers": 2}}, "mesh": {"shape": [4]}}
# bf16 compute from fp16 shards built on meta (rank 0 sums a cast copy's bf16 gradients in
# float32), and a float32 model built in full (the replica is the model itself, its .grad the sum)
CASES = [
    (
        {**MESHED, "init": "meta", "fsdp": {"mixed_precision": {"param_dtype": "bfloat16", "reduce_dtype": "float32"}}},
        "bfloat16",
    ),
    ({**MESHED, "init": "full", "model": {**MESHED["model"], "dtype": "float32"}}, "float32"),
]


@pytest.mark.slow
@pytest.mark.parametrize("base, replica_dtype", CASES, ids=["meta-bf16-compute", "full-float32"])
def test_one_replica_on_rank_0_gives_every_rank_the_same_reference(base, replica_dtype):
    each = run_setup(RunSetup.from_mapping(base), backend="gloo", timeout_s=300)
    one = run_setup(RunSetup.from_mapping({**base, "numerics_reference": "rank_0"}), backend="gloo", timeout_s=300)
    for a, b in zip(each["ranks"], one["ranks"]):
        na, nb = a["numerics"], b["numerics"]
        assert na["replica_dtype"] == nb["replica_dtype"] == replica_dtype
        assert na["forward_output"] == nb["forward_output"] and na["loss"] == nb["loss"], a["rank"]
        assert [g["fqn"] for g in na["grads"]] == [g["fqn"] for g in nb["grads"]]
        for ga, gb in zip(na["grads"], nb["grads"]):
            assert ga["max_abs_ref"] == pytest.approx(gb["max_abs_ref"], rel=1e-5, abs=1e-9), (a["rank"], ga["fqn"])
            assert gb["max_abs_diff"] == pytest.approx(ga["max_abs_diff"], rel=0.05, abs=1e-6), (a["rank"], ga, gb)
