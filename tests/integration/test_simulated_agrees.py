"""One config checked both real and simulated: the two observation documents agree.

The Qwen3-0.6B spec runs on 8 real gloo ranks (specs/qwen3_0_6b_8_ranks.yaml); the same setup
on the fake backend, observing all 8 ranks, must record the same parameters, parameter states,
step tensors, FSDP units, inputs and collectives. What legitimately differs is left out and
named here: timings; numerics (a simulation has none); the environment's backend fields and
each real rank's own environment record (host, device: one simulating process has none); the
fields read from a tensor's values or storage (a parameter's or buffer's ``finite``, ``pinned``,
``grad_pinned``: null in a simulation); and
in FSDPMemTracker's snapshots, the peaks ("Peak", "Peak Backward") and the ``temp`` category
(with the ``total`` that includes it). A fake collective completes at once, a real one
asynchronously: a real rank was seen still holding a reduce-scatter-sized temporary buffer
(31,461,888 B, one layer's bf16 gradients) at the next unit's "Before Pre-Backward" while its
gloo work was in flight, and the peaks split their bytes between categories differently. Every
other category of every other snapshot must agree exactly.
"""

from __future__ import annotations

import dataclasses

import pytest

from harness.load.spec import load_spec
from tests.support import SPECS
from tests.support.observations import without_value_fields

SPEC = SPECS / "qwen3_0_6b_8_ranks.yaml"
PEAK_STATES = {"Peak", "Peak Backward"}
TIMING_DEPENDENT = {"temp", "total"}


def _comparable(rank_doc: dict) -> dict:
    doc = {k: v for k, v in rank_doc.items() if k not in ("timings_s", "numerics", "environment")}
    for part in ("params", "buffers"):
        doc[part] = without_value_fields(rank_doc.get(part, []))
    doc["memory"] = [
        {**m, "bytes": {k: v for k, v in m["bytes"].items() if k not in TIMING_DEPENDENT}}
        for m in rank_doc["memory"]
        if m["state"] not in PEAK_STATES
    ]
    return doc


@pytest.mark.slow
def test_fake_backend_agrees_with_real_ranks(spec_observation, gloo_observation):
    spec = load_spec(SPEC)
    real = gloo_observation(spec, every=True)  # every field, as the simulated run below records
    simulated_setup = dataclasses.replace(spec.setup, observe_ranks=tuple(range(spec.setup.world_size)))
    fake = spec_observation(spec, setup=simulated_setup, backend="fake")

    assert fake["environment"]["simulated"] and not real["environment"]["simulated"]
    assert real["environment"]["backend"] == "gloo"
    assert all(r["environment"]["host"] for r in real["ranks"])  # left out of the comparison below
    assert fake["fsdp_units"] == real["fsdp_units"]
    assert [r["rank"] for r in fake["ranks"]] == [r["rank"] for r in real["ranks"]] == list(range(8))
    for sim, got in zip(fake["ranks"], real["ranks"]):
        sim_doc, real_doc = _comparable(sim), _comparable(got)
        for key in sorted(real_doc):
            assert sim_doc[key] == real_doc[key], f"rank {got['rank']}: {key} differs between fake and gloo"
    # the memory comparison is not vacuous
    assert len(_comparable(real["ranks"][0])["memory"]) > 10
