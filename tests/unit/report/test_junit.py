"""``harness run --junitxml``: one JUnit test case per spec entry, as pytest names its items.

Held against pytest's own ``--junitxml`` for the same spec: a copy of the walkthrough with one
wrong figure (a failure), one declared deviation still observed (xfail) and one no longer
observed (xpass: a failure), simulated with the fake backend (numerics entries skip).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness.judge.evaluate import evaluate_spec
from harness.load.spec import load_spec
from harness.report.junit import junit_xml, load_error_case, nodeid, result_case, shorten_message, table_slug
from tests.support import WALKTHROUGH
from tests.support.junit import cases_of
from tests.support.observations import rank_doc, walkthrough_observation


def test_names_follow_pytest_item_ids():
    spec = load_spec(WALKTHROUGH)
    item = next(i for i in spec.items if i.entry.table == "shard per rank")
    assert table_slug("shard per rank") == "shard_per_rank"
    assert (
        nodeid("specs/qwen3_walkthrough.yaml", item.entry)
        == "specs/qwen3_walkthrough.yaml::shard_per_rank::input_layernorm.weight"
    )
    case = result_case("specs/qwen3_walkthrough.yaml", evaluate_spec(spec, walkthrough_observation())[0])
    (got,) = cases_of(junit_xml([case])).keys()
    assert got == ("specs.qwen3_walkthrough.yaml.configuration", "hidden_size_batch_seq")


def test_outcomes_and_counts():
    spec = load_spec(WALKTHROUGH)
    obs = walkthrough_observation()
    for p in rank_doc(obs, 1)["params"]:  # one wrong shard on rank 1
        if p["fqn"] == "layers.0.self_attn.q_proj.weight":
            p["local_shape"] = [129, 512]
    results = evaluate_spec(spec, obs)
    failing = [r for r in results if r.status in ("fail", "error")]
    assert [r.entry.id for r in failing][:1] == ["self_attn.q_proj.weight"]
    xml_text = junit_xml(
        [result_case("s.yaml", r) for r in results] + [load_error_case("bad.yaml", ValueError("x: y"))]
    )
    suite = ET.fromstring(xml_text).find("testsuite")
    assert int(suite.get("tests")) == len(results) + 1
    assert int(suite.get("failures")) == len(failing) + 1 and suite.get("errors") == "0"
    cases = cases_of(xml_text)
    assert cases[("bad.yaml", "load")]["message"] == "spec does not load: x: y"
    r = failing[0]
    case = cases[(f"s.yaml.{table_slug(r.entry.table)}", r.entry.id)]
    assert case["outcome"] == "failure" and case["text"] == r.explain()


def test_long_messages_are_shortened_as_pytest_does():
    msg = "\n".join(f"line {i} " + "x" * 60 for i in range(20))
    short = shorten_message(msg)
    assert short.endswith("[+13 more lines; full report in element text]") and len(short) < 560
    assert shorten_message("short") == "short"
