"""``python -m harness compare A.json B.json`` (did FSDP2 behave differently?) and the strict JSON that
``run --json`` writes."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from harness.cli import main
from harness.contract import fields, strict_json
from harness.contract.instrument_names import INSTRUMENTS
from harness.report.compare import (
    INSTRUMENTS_KEY,
    Key,
    RunFile,
    compare_documents,
    compare_runs,
    flatten_observation,
    mask,
    read_run_file,
    select,
)
from harness.report.compare_text import WIDTH, format_report, summary_line
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


def _rank(doc: dict, rank: int) -> dict:
    return next(r for r in doc["ranks"] if r["rank"] == rank)


def _snapshot(doc: dict, rank: int, unit: str = "layers.1", state: str = "After Pre-Forward") -> dict:
    return next(m for m in _rank(doc, rank)["memory"] if m["module"] == unit and m["state"] == state)


def _error(message: str, traceback: str = "") -> dict:
    return {"type": "RuntimeError", "qualname": "builtins.RuntimeError", "message": message, "phase": "backward"} | (
        {"traceback": traceback} if traceback else {}
    )


def _compare(a: dict, b: dict) -> list:
    return compare_documents({"specs/s.yaml": a}, {"specs/s.yaml": b})


def test_a_changed_memory_value_is_exactly_that_field(document):
    changed = copy.deepcopy(document)
    snap = _snapshot(changed, 1)
    snap.update(step_index=0, microbatch=0)
    before = snap["bytes"]["unsharded_param"]
    snap["bytes"]["unsharded_param"] = before * 2
    same = copy.deepcopy(changed)
    _snapshot(same, 1)["bytes"]["unsharded_param"] = before
    differences = compare_documents({"specs/w.yaml": same}, {"/abs/specs/w.yaml": changed})
    where = ("layers.1", "After Pre-Forward", 0, 0, 0)
    assert [(d.key, d.a, d.b, d.apart) for d in differences] == [
        (Key("memory", 1, where, "unsharded_param", "memory.bytes.unsharded_param"), before, before * 2, None)
    ]
    assert format_report(differences)[-3:] == [
        "w.yaml",
        "  memory  rank 1, layers.1, After Pre-Forward, step 0, microbatch 0",
        f"    unsharded_param: {before} (A) ≠ {before * 2} (B)",
    ]
    assert summary_line(differences, 1) == "compare: 1 behaviour difference in 1 of 1 spec"


def test_a_changed_collective_names_its_rank_position_field_and_path(document):
    changed = copy.deepcopy(document)
    changed["ranks"][0]["collectives"][2]["reduce_op"] = "MAX"
    differences = _compare(document, changed)
    assert [(d.key.part, d.key.rank, d.key.selector, d.key.field, d.key.path, d.b) for d in differences] == [
        # a collective is named by its issue index and op (the collectives kind's record key)
        ("collectives", 0, (2, "all_gather"), "reduce_op", "collectives.reduce_op", "MAX")
    ]


def test_a_spec_on_one_side_only_is_a_difference(document):
    differences = compare_documents({"a.yaml": document}, {"a.yaml": document, "b.yaml": document})
    assert format_report(differences)[-3:] == ["b.yaml", "  not run in A", "  B: observed"]


def test_a_failed_run_shows_its_error_not_only_that_it_is_missing(document):
    error = "rank 0 died in backward: AttributeError: 'NoneType' object has no attribute 'get_future'\nline 2"
    differences = compare_runs(RunFile({"s.yaml": document}), RunFile({}, {"s.yaml": error}))
    assert [(d.key.field, d.a, d.apart) for d in differences] == [("run", "observed", None)]
    lines = format_report(differences)
    assert lines[-4:] == [
        "  A: observed",
        "  the run failed in B:",
        "    rank 0 died in backward: AttributeError: 'NoneType' object has no attribute 'get_future'",
        "    line 2",
    ]
    assert lines[1] == "  s.yaml: observed in A, failed in B"
    same = compare_runs(RunFile({}, {"s.yaml": error}), RunFile({}, {"s.yaml": error}))
    assert same == []  # the same failure on both sides is no difference


def test_a_spec_skipped_whole_on_one_side_says_why(tmp_path: Path, document):
    skip = {"spec": "specs/s.yaml", "status": "skip", "message": "describes a cpu build of torch"}
    path = tmp_path / "b.json"
    path.write_text(strict_json.dumps({"observations": {}, "results": [skip, skip]}))
    skipped = read_run_file(path)
    assert skipped.skipped == {"specs/s.yaml": "describes a cpu build of torch"}
    differences = compare_runs(RunFile({"specs/s.yaml": document}), skipped)
    assert format_report(differences)[-2:] == ["  A: observed", "  B: skipped: describes a cpu build of torch"]


def test_values_recorded_after_one_sides_error_are_counted_not_listed(document):
    raised, finished = copy.deepcopy(document), copy.deepcopy(document)
    _rank(raised, 0)["error"] = _error("attempting to assign a gradient with dtype")
    _rank(finished, 0)["error"] = None
    del _rank(raised, 0)["params"][1:]  # what the raising rank never recorded
    lines = format_report(_compare(raised, finished))
    left_out = len(document["ranks"][0]["params"]) - 1
    assert lines[-1].startswith("  rank 0 raised RuntimeError in A, not in B: ") and lines[-1].endswith(
        "values recorded only in B not listed"
    )
    assert not any(line.startswith("  param  rank 0") for line in lines) and left_out > 0
    assert '    type: "RuntimeError" (A) ≠ absent (B)' in lines  # the error itself is listed


def test_timings_pids_environment_and_tracebacks_are_set_apart(document):
    changed = copy.deepcopy(document)
    _rank(changed, 0)["timings_s"]["forward"] = 9.0
    changed["environment"]["torch_version"] = "2.14.1"
    for doc, tb in ((document, 'File "/a/venv/x.py", line 10'), (changed, 'File "/b/venv/x.py", line 12 in f')):
        _rank(doc, 1)["error"] = _error("boom", tb)
    differences = _compare(document, changed)
    assert {(d.key.path, d.apart) for d in differences} == {
        ("timings_s.forward", "timing"),
        ("environment.torch_version", "environment"),
        ("error.traceback", "diagnostic"),
    }
    assert summary_line(differences, 1) == ("compare: no behaviour difference in 1 spec; 3 set apart")
    assert summary_line(differences, 1, every=True) == "compare: 3 differences in 1 of 1 spec"


def test_messages_are_compared_with_ports_paths_and_line_numbers_masked(document):
    a, b = copy.deepcopy(document), copy.deepcopy(document)
    _rank(a, 2)["error"] = _error("Connection closed by peer [127.0.0.1]:41234 (/tmp/x/gloo.cc:42)")
    _rank(b, 2)["error"] = _error("Connection closed by peer [127.0.0.1]:51877 (/tmp/y/gloo.cc:57)")
    a["setup"]["hooks"] = {"file": "/work/wt/one/specs/h.py"}  # another checkout, the same hooks
    b["setup"]["hooks"] = {"file": "/tmp/snap/specs/h.py"}
    assert _compare(a, b) == []
    _rank(b, 2)["error"]["message"] = "Connection reset by peer [127.0.0.1]:51877 (/tmp/y/gloo.cc:57)"
    differences = _compare(a, b)
    assert [(d.key.path, d.apart) for d in differences] == [("error.message", None)]
    assert mask("at 10.1.2.3:29500, pid 4242, 0x7f3a2b1c4d5e") == "at 10.1.2.3:<port>, pid <pid>, 0x<addr>"
    uniform = "expects uniform gradient dtype but got {torch.float32, torch.bfloat16}"
    assert mask(uniform) == "expects uniform gradient dtype but got {torch.bfloat16, torch.float32}"  # a set's order


def test_what_varies_on_a_real_backend_is_set_apart_there_and_not_in_a_simulation(document):
    a, b = copy.deepcopy(document), copy.deepcopy(document)
    _snapshot(a, 2)["bytes"]["temp"], _snapshot(b, 2)["bytes"]["temp"] = 0, 4_720_896
    assert [d.apart for d in _compare(a, b)] == ["varies"]  # gloo: thread timing
    for doc in (a, b):
        doc["environment"]["backend"] = "fake"
    assert [d.apart for d in _compare(a, b)] == [None]  # fake: deterministic, a behaviour difference
    peak, other = copy.deepcopy(document), copy.deepcopy(document)
    for doc, held in ((peak, 2), (other, 1)):
        _rank(doc, 0)["memory"].append({"module": "", "state": "Peak", "bytes": {"activation": held}})
    assert [(d.key.path, d.apart) for d in _compare(peak, other)] == [("memory.bytes.activation", "varies")]


def test_include_and_exclude_select_by_declared_path(document):
    changed = copy.deepcopy(document)
    changed["ranks"][0]["collectives"][2]["reduce_op"] = "MAX"
    _snapshot(changed, 1)["bytes"]["unsharded_param"] += 1
    differences = _compare(document, changed)
    assert [d.key.path for d in select(differences, include=["memory.*"])] == ["memory.bytes.unsharded_param"]
    assert [d.key.path for d in select(differences, exclude=["memory.*"])] == ["collectives.reduce_op"]
    assert select(differences, include=["params.*"]) == []


def test_every_rank_value_is_flattened_with_a_declared_path_and_timings_only_when_asked(document):
    every = flatten_observation(document, every=True)
    parts = {k.part for k in every}
    assert {"memory", "collectives", "params", "steps", "environment", "setup", "timings_s"} <= parts
    for key in every:
        fields.lookup(key.path)  # raises KeyError when undeclared
    assert {k.part for k in flatten_observation(document)} == parts - {"timings_s"}


def _write(path: Path, doc: dict, failed: dict | None = None) -> Path:
    path.write_text(strict_json.dumps({"observations": {"specs/s.yaml": doc}, "failed_specs": failed or {}}))
    return path


def test_compare_command_exit_status_lines_and_json(tmp_path: Path, document, capsys):
    changed = copy.deepcopy(document)
    changed["ranks"][1]["params"][0]["local_shape"] = [1, 1]
    timed = copy.deepcopy(document)
    _rank(timed, 0)["timings_s"]["forward"] = 7.0
    a, b, c = (
        _write(tmp_path / "a.json", document),
        _write(tmp_path / "b.json", timed),
        _write(tmp_path / "c.json", changed),
    )
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-2:] == [
        "set apart (--all lists them): timings 1",
        "compare: no behaviour difference in 1 spec; 1 set apart",
    ]
    assert main(["compare", str(a), str(b), "--all"]) == 1
    assert "    forward: 0.01 (A) ≠ 7.0 (B)" in capsys.readouterr().out
    assert main(["compare", str(a), str(c), "--json", str(tmp_path / "out.json")]) == 1
    out = capsys.readouterr().out
    assert "  param  rank 1, " in out and "    local_shape: " in out
    assert out.strip().splitlines()[-2] == "compare: 1 behaviour difference in 1 of 1 spec"
    written = strict_json.loads((tmp_path / "out.json").read_text())
    assert written["behaviour_differences"] == 1 and written["differences"][0]["path"] == "params.local_shape"
    assert main(["compare", str(a), str(c), "--exclude", "params.*"]) == 0
    capsys.readouterr()
    (tmp_path / "bad.json").write_text("{")
    assert main(["compare", str(a), str(tmp_path / "bad.json")]) == 2
    assert "bad.json: not JSON" in capsys.readouterr().out


def test_lines_stay_short_however_long_the_values(tmp_path: Path, document, capsys):
    a, b = copy.deepcopy(document), copy.deepcopy(document)
    _rank(a, 0)["error"] = _error("x" * 900 + " expected float32")
    _rank(b, 0)["error"] = _error("x" * 900 + " expected bfloat16")
    assert main(["compare", str(_write(tmp_path / "a.json", a)), str(_write(tmp_path / "b.json", b))]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= WIDTH
    assert any("float32" in line for line in lines) and any("bfloat16" in line for line in lines)


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


def test_runs_of_different_instruments_compare_only_the_fields_both_record(document):
    """A run with the collectives alone against one with every instrument: the sets differ (set
    apart, said once); memory and the replica's fields, recorded on one side only, are not
    compared; a collective that differs still is."""
    pruned = copy.deepcopy(document)
    pruned["setup"]["instruments"] = ["collectives"]
    for entry in pruned["ranks"]:
        entry.update(memory=[], numerics=None, params=[], param_states=[])
    differences = _compare(document, pruned)
    assert [(d.key, d.a, d.b, d.apart) for d in differences] == [
        (INSTRUMENTS_KEY, sorted(INSTRUMENTS), ["collectives"], "instruments")
    ]
    lines = format_report(differences)
    at = lines.index("instruments differ: only the fields both runs recorded are compared")
    assert lines[at + 1].startswith("  s.yaml: only in A: events, experts, fully_shard_calls, grads, memory,")
    assert lines[-1] == "set apart (--all lists them): instruments on one side only 1"
    pruned["ranks"][0]["collectives"][2]["reduce_op"] = "MAX"
    assert [(d.key.path, d.b, d.apart) for d in _compare(document, pruned)][1:] == [
        ("collectives.reduce_op", "MAX", None)
    ]
    every = copy.deepcopy(pruned)
    del every["setup"]["instruments"]
    assert [d.key.path for d in _compare(every, pruned)][:1] == ["setup.instruments"]
    assert "memory.bytes.sharded_param" in {d.key.path for d in _compare(document, every)}  # like with like: compared
