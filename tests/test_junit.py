"""``harness run --junitxml``: one JUnit test case per spec entry, as pytest names its items.

Held against pytest's own ``--junitxml`` for the same spec: a copy of the walkthrough with one
wrong figure (a failure), one declared deviation still observed (xfail) and one no longer
observed (xpass: a failure), simulated with the fake backend (numerics entries skip).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.judge.evaluate import evaluate_spec
from harness.load.spec import load_spec
from harness.report.junit import junit_xml, load_error_case, nodeid, result_case, shorten_message, table_slug
from observations import rank_doc, walkthrough_observation

ROOT = Path(__file__).resolve().parents[1]
WALKTHROUGH = ROOT / "specs" / "qwen3_walkthrough.yaml"

MUTATIONS = [  # (text in specs/qwen3_walkthrough.yaml, replacement)
    ('numel: "≈2.36M"}', 'numel: "≈2.37M"}'),                                          # fail
    ('local_bytes: "1.18 MB"}', 'local_bytes: "1.19 MB", deviation: {reason: "a difference the spec declares"}}'),  # xfail
    ('count: 11}', 'count: 11, deviation: {reason: "a difference no longer seen"}}'),  # xpass (first match: eleven_params)
]


def cases_of(xml_text: str) -> dict[tuple[str, str], dict]:
    """(classname, name) -> outcome, message, text of each testcase."""
    root = ET.fromstring(xml_text)
    out = {}
    for tc in root.iter("testcase"):
        child = next(iter(tc), None)
        outcome = "pass" if child is None else child.tag + (f":{child.get('type')}" if child.get("type") else "")
        out[(tc.get("classname"), tc.get("name"))] = {
            "outcome": outcome, "message": None if child is None else child.get("message"),
            "text": None if child is None else (child.text or ""),
        }
    return out


def test_names_follow_pytest_item_ids():
    spec = load_spec(WALKTHROUGH)
    item = next(i for i in spec.items if i.entry.table == "shard per rank")
    assert table_slug("shard per rank") == "shard_per_rank"
    assert nodeid("specs/qwen3_walkthrough.yaml", item.entry) == \
        "specs/qwen3_walkthrough.yaml::shard_per_rank::input_layernorm.weight"
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
    xml_text = junit_xml([result_case("s.yaml", r) for r in results] + [load_error_case("bad.yaml", ValueError("x: y"))])
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


@pytest.mark.slow
def test_same_cases_as_pytests_own_junitxml(tmp_path):
    text = WALKTHROUGH.read_text(encoding="utf-8")
    for old, new in MUTATIONS:
        assert old in text, old
        text = text.replace(old, new, 1)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "walk.yaml").write_text(text, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("PYTEST_ADDOPTS", None)
    ours = subprocess.run([sys.executable, "-m", "harness", "run", "specs/walk.yaml", "--backend", "fake",
                           "--failures-only", "--junitxml", "ours.xml"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert ours.returncode == 1, ours.stdout + ours.stderr
    # pytest with the installed spec plugin (harness.pytest_plugin), rooted at tmp_path so that the node ids
    # are relative to the same directory the CLI ran in
    theirs = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                             "--rootdir", str(tmp_path), "-o", "junit_family=xunit2", "--fsdp2-backend", "fake",
                             "specs/walk.yaml", "--junitxml", "pytest.xml"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert theirs.returncode == 1, theirs.stdout + theirs.stderr
    ours_cases = cases_of((tmp_path / "ours.xml").read_text(encoding="utf-8"))
    theirs_cases = cases_of((tmp_path / "pytest.xml").read_text(encoding="utf-8"))
    assert list(ours_cases) == list(theirs_cases)  # same test cases, same order

    def unrooted(text):
        return None if text is None else text.replace(f"{tmp_path}/", "")

    outcomes = {}
    for key, theirs_case in theirs_cases.items():
        ours_case = ours_cases[key]
        assert ours_case["outcome"] == theirs_case["outcome"], key
        # pytest's items load the spec by absolute path, the CLI by the path it was given
        assert ours_case["message"] == unrooted(theirs_case["message"]), key
        if theirs_case["outcome"] == "failure":
            assert ours_case["text"] == unrooted(theirs_case["text"]), key
        outcomes[theirs_case["outcome"]] = outcomes.get(theirs_case["outcome"], 0) + 1
    assert outcomes == {"pass": len(theirs_cases) - 5, "failure": 2, "skipped:pytest.xfail": 1, "skipped:pytest.skip": 2}
    fail = theirs_cases[("specs.walk.yaml.layer_totals", "layer_numel")]
    assert "≈2.37M" in fail["text"] and "specs/walk.yaml:" in fail["text"]
