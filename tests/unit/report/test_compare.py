"""``python -m harness compare A.json B.json`` and the strict JSON that ``run --json`` writes."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from harness.cli import main
from harness.contract import strict_json
from harness.report.compare import (
    Key,
    compare_documents,
    flatten_observation,
    format_differences,
    summary_line,
)
from tests.support.observations import walkthrough_observation


def _strict(text: str):
    """Parse as RFC 8259 does: the bare tokens Infinity / NaN are refused."""

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture()
def document() -> dict:
    """A whole observation document of the walkthrough (``tests/support/observations.py``)."""
    return walkthrough_observation()


def test_a_changed_memory_value_is_exactly_that_field(document):
    changed = copy.deepcopy(document)
    rank1 = next(r for r in changed["ranks"] if r["rank"] == 1)
    snap = next(m for m in rank1["memory"] if m["module"] == "layers.1" and m["state"] == "After Pre-Forward")
    snap.update(step_index=0, microbatch=0)
    before = snap["bytes"]["unsharded_param"]
    snap["bytes"]["unsharded_param"] = before * 2
    rank1["timings_s"] = {"forward": 1.0}  # timings are never compared
    same = copy.deepcopy(changed)
    next(m for m in same["ranks"][1]["memory"] if m.get("step_index") == 0)["bytes"]["unsharded_param"] = before
    same["ranks"][1]["timings_s"] = {"forward": 2.0}
    differences = compare_documents({"specs/w.yaml": same}, {"/abs/specs/w.yaml": changed})
    assert [(d.key, d.a, d.b) for d in differences] == [
        (Key("memory", 1, ("layers.1", "After Pre-Forward", 0, 0, 0), "unsharded_param"), before, before * 2)
    ]
    assert format_differences(differences) == [
        "w.yaml",
        "  memory  rank 1, layers.1, After Pre-Forward, step 0, microbatch 0",
        f"    unsharded_param: {before} (A) ≠ {before * 2} (B)",
    ]
    assert summary_line(differences, 1) == "compare: 1 observed value differ in 1 of 1 spec (timings ignored)"


def test_a_changed_collective_names_its_rank_position_and_field(document):
    changed = copy.deepcopy(document)
    changed["ranks"][0]["collectives"][2]["reduce_op"] = "MAX"
    differences = compare_documents({"s": document}, {"s": changed})
    assert [(d.key.part, d.key.rank, d.key.selector, d.key.field, d.b) for d in differences] == [
        ("collectives", 0, (2,), "reduce_op", "MAX")
    ]


def test_a_spec_on_one_side_only_is_a_difference(document):
    differences = compare_documents({"a.yaml": document}, {"a.yaml": document, "b.yaml": document})
    assert format_differences(differences) == ["b.yaml", "  observed only in B"]


def test_every_rank_value_is_flattened_and_timings_are_not(document):
    flat = flatten_observation(document)
    parts = {k.part for k in flat}
    assert {"memory", "collectives", "params", "steps", "environment", "setup"} <= parts
    assert not any("timings_s" in (k.field, k.part) or k.field == "pid" for k in flat)


def test_compare_command_exit_status_and_lines(tmp_path: Path, document, capsys):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    changed = copy.deepcopy(document)
    changed["ranks"][1]["params"][0]["local_shape"] = [1, 1]
    for path, doc in ((a, document), (b, document), (c, changed)):
        path.write_text(strict_json.dumps({"observations": {"specs/s.yaml": doc}}))
    assert main(["compare", str(a), str(b)]) == 0
    assert (
        capsys.readouterr().out.strip().splitlines()[-1]
        == "compare: the observations of 1 spec are the same (timings ignored)"
    )
    assert main(["compare", str(a), str(c)]) == 1
    out = capsys.readouterr().out
    assert "  param  rank 1, " in out and "    local_shape: " in out
    assert out.strip().splitlines()[-1] == "compare: 1 observed value differ in 1 of 1 spec (timings ignored)"
    (tmp_path / "bad.json").write_text("{")
    assert main(["compare", str(a), str(tmp_path / "bad.json")]) == 2
    assert "bad.json: not JSON" in capsys.readouterr().out


def test_strict_json_round_trips_non_finite_numbers():
    doc = {
        "setup": {"schedule": {"steps": [{"clip_grad_norm": {"max_norm": 1.0, "norm_type": math.inf}}]}},
        "grad_norms": [{"norm_type": -math.inf, "value": 2.5}],
        "names": ["Infinity-like", "x"],
    }
    text = strict_json.dumps(doc)
    assert _strict(text)["grad_norms"][0]["norm_type"] == "-Infinity"
    assert strict_json.loads(text) == doc
    assert math.isnan(strict_json.loads(strict_json.dumps({"x": math.nan}))["x"])
    assert strict_json.loads(json.dumps(doc)) == doc  # files written before (bare tokens) read the same


def test_run_json_is_strict_json(tmp_path: Path):
    """``--json``'s writer: ``norm_type: .inf`` must not come out as a bare ``Infinity``."""
    from harness.cli.console import stdout_console
    from harness.cli.run import save_results

    target = tmp_path / "out.json"
    payload = {"observations": {"s": {"setup": {"norm_type": math.inf}}}, "results": []}
    assert save_results(stdout_console(), str(target), payload)
    assert _strict(target.read_text())["observations"]["s"]["setup"]["norm_type"] == "Infinity"
    assert strict_json.loads(target.read_text()) == payload
