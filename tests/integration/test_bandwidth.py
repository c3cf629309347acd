"""The shipped specs/cluster_bandwidth.yaml on real gloo ranks: its busbw figures are the formula on
the recorded times."""

from __future__ import annotations

import math

import pytest

from harness.judge.evaluate import FAILING, evaluate_spec
from harness.language.algbw_busbw import bandwidth_rows
from harness.load.spec import load_spec
from tests.support import SPECS


@pytest.mark.slow
def test_cluster_spec_busbw_is_the_formula_on_the_recorded_times(spec_observation):
    spec = load_spec(SPECS / "cluster_bandwidth.yaml")
    obs = spec_observation(spec)
    assert not [r.entry.id for r in evaluate_spec(spec, obs) if r.status in FAILING]
    recorded = {}
    for rank_doc in obs["ranks"]:
        for row in rank_doc["bandwidth"]:
            recorded.setdefault((row["op"], row["name"]), []).append(row)
    rows = bandwidth_rows(obs)
    assert {(r.op, r.name) for r in rows} == set(recorded)
    assert len(rows) == 8  # 2 ops x 3 sizes, and the step's all-gather and reduce-scatter
    for r in rows:
        per_rank = recorded[r.op, r.name]
        assert len(per_rank) == 4 and {row["wrong"] for row in per_rank} == {0}
        t = math.fsum(row["time_s"] for row in per_rank) / 4
        s = per_rank[0]["size_bytes"]
        assert r.algbw == pytest.approx(s / t / 1e9, rel=1e-12)
        assert r.busbw == pytest.approx(s / t / 1e9 * 3 / 4, rel=1e-12)
        assert s <= 16_000_000 or r.name in ("walkthrough_layer", "step")  # the CPU cap
