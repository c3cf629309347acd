"""tests/support/agreement.py: a claimed value that differs is reported on exactly its key; an
unclaimed one (values, peaks, the environment) is not; the judge's verdicts are compared too."""

from __future__ import annotations

import copy

from harness.load.spec import load_spec
from tests.support.agreement import disagreements, verdict_disagreements
from tests.support.observations import walkthrough_observation
from tests.support.specs import TINY, write_spec


def _pair() -> tuple[dict, dict]:
    real = walkthrough_observation()
    fake = copy.deepcopy(real)
    fake["environment"].update(simulated=True, backend="fake", launcher="simulated")
    return fake, real


def test_identical_documents_agree_and_the_environment_is_not_claimed():
    fake, real = _pair()
    assert disagreements(fake, real) == []


def test_a_claimed_value_that_differs_is_reported_on_its_key():
    fake, real = _pair()
    fake["ranks"][2]["params"][0]["local_shape"] = [1, 1]
    fake["ranks"][1]["memory"][0]["bytes"]["sharded_param"] += 1
    lines = disagreements(fake, real)
    assert len(lines) == 2, lines
    assert lines[0].startswith("memory rank 1 ") and "sharded_param" in lines[0]
    assert lines[1].startswith("params rank 2 ") and "local_shape: fake [1, 1]" in lines[1]


def test_an_unclaimed_value_is_not_compared():
    fake, real = _pair()
    fake["ranks"][0]["params"][0]["finite"] = None  # read from values: null in a simulation
    fake["ranks"][0]["environment"] = None
    peak = {"module": "", "state": "Peak", "bytes": {"activation": 1}}
    fake["ranks"][0]["memory"].append(peak)
    real["ranks"][0]["memory"].append({**peak, "bytes": {"activation": 2}})
    for m in fake["ranks"][0]["memory"]:
        m["bytes"]["temp"] = m["bytes"].get("temp", 0) + 1
    assert disagreements(fake, real) == []
    fake["environment"]["world_size"] = 5  # the world's shape is claimed
    assert disagreements(fake, real) == ["environment rank None () world_size: fake 5, gloo 4"]


def test_a_verdict_fake_gives_differently_is_reported(tmp_path):
    entry = "\n      - {id: n, step: step1.x_norm, dtype: float16}"
    text = TINY.replace("shape: [2, 8, 512]}", "shape: [2, 8, 512]}" + entry)
    spec = load_spec(write_spec(tmp_path, text))
    fake, real = _pair()
    assert verdict_disagreements(spec, fake, real) == []
    for r in fake["ranks"]:
        for s in r["steps"]:
            s["dtype"] = "float32"
    lines = verdict_disagreements(spec, fake, real)
    assert len(lines) == 1 and lines[0].startswith("n (step): fake fail, gloo pass"), lines
