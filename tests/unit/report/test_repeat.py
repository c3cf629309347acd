"""``run --repeat N``: what differed between runs, and entries that read it reported as unstable."""

from __future__ import annotations

import copy

import pytest

from harness.cli import main
from harness.judge.evaluate import FAILING, evaluate_spec
from harness.load.spec import load_spec
from harness.report import repeat
from tests.support import WALKTHROUGH
from tests.support.observations import walkthrough_observation

SPEC = WALKTHROUGH


@pytest.fixture(scope="module")
def spec():
    return load_spec(SPEC)


def _unsharded(doc: dict, rank: int, unit: str = "layers.0") -> dict:
    rank_doc = next(r for r in doc["ranks"] if r["rank"] == rank)
    return next(m for m in rank_doc["memory"] if m["module"] == unit and m["state"] == "After Pre-Forward")


def test_an_entry_reading_a_varying_value_is_unstable_with_both_values_and_runs(spec):
    runs = [walkthrough_observation() for _ in range(3)]
    held = _unsharded(runs[1], 1)["bytes"]["unsharded_param"]
    _unsharded(runs[1], 1)["bytes"]["unsharded_param"] = 2 * held  # run 2 kept a second buffer
    varying = repeat.varying_fields(runs)
    assert [(v.key.part, v.key.rank, v.key.selector, v.key.field, v.values) for v in varying] == [
        ("memory", 1, ("layers.0", "After Pre-Forward", None, None, 0), "unsharded_param", (held, 2 * held, held))
    ]
    assert repeat.format_varying(varying) == [
        f"  varies: memory rank 1, layers.0, After Pre-Forward: unsharded_param: {held} (runs 1, 3); {2 * held} (run 2)"
    ]
    outcomes = repeat.repeated_outcomes([evaluate_spec(spec, doc) for doc in runs])
    unstable = [o for o in outcomes if o.status == "unstable"]
    assert [o.result.entry.id for o in unstable] == ["unsharded_after_step0"]
    lines = repeat.format_unstable(outcomes)
    assert lines[0].startswith("~ unstable ") and lines[0].endswith(
        'unsharded_after_step0: status "pass" (runs 1, 3); "fail" (run 2)'
    )
    assert lines[1].startswith("    unsharded_param: ") and "(runs 1, 3)" in lines[1] and "(run 2)" in lines[1]
    assert repeat.exit_status(outcomes, FAILING) == repeat.UNSTABLE_EXIT == 3
    assert repeat.summary_line(outcomes, 3, FAILING) == f"{len(outcomes) - 1} passed, 0 failed, 1 unstable over 3 runs"


def test_a_varying_value_within_an_entrys_tolerance_is_still_unstable(spec):
    runs = [walkthrough_observation() for _ in range(2)]
    _unsharded(runs[1], 0)["bytes"]["unsharded_param"] += 2  # "4.72 MB" still holds
    outcomes = repeat.repeated_outcomes([evaluate_spec(spec, doc) for doc in runs])
    assert [(o.result.entry.id, [s for s, _ in o.runs]) for o in outcomes if o.status == "unstable"] == [
        ("unsharded_after_step0", ["pass", "pass"])
    ]


def test_a_message_that_differs_only_in_a_port_is_not_unstable():
    """A bystander's gloo error names its ephemeral port (specs/rank_killed_by_signal.yaml under --repeat)."""
    from harness.judge.checks import check
    from harness.language.entry import make_entry

    entry = make_entry(
        "expect_error", {"message": {"matches": "reset by peer"}}, id="e", spec="x.yaml", line=1, section="S"
    )
    runs = []
    for port in (16812, 913):
        doc = walkthrough_observation()
        for r in doc["ranks"]:
            r["error"] = {
                "type": "RuntimeError",
                "qualname": "builtins.RuntimeError",
                "phase": "backward",
                "message": f"Read error [127.0.0.1]:{port}: Connection reset by peer",
            }
        runs.append([check(entry, doc)])
    assert [o.status for o in repeat.repeated_outcomes(runs)] == ["pass"]


def test_the_same_failure_in_every_run_is_a_failure_not_unstable(spec):
    odd = walkthrough_observation()
    _unsharded(odd, 1)["bytes"]["unsharded_param"] = 1
    outcomes = repeat.repeated_outcomes([evaluate_spec(spec, copy.deepcopy(odd)) for _ in range(2)])
    assert {o.status for o in outcomes} == {"pass", "fail"}
    assert repeat.exit_status(outcomes, FAILING) == 1
    assert repeat.varying_fields([odd, copy.deepcopy(odd)]) == []


def test_values_declared_to_vary_are_counted_not_listed_and_a_surprise_is_listed():
    runs = [walkthrough_observation() for _ in range(2)]
    for held, doc in zip((0, 4_720_896), runs):  # gloo: temp depends on thread timing (fields.py)
        _unsharded(doc, 2)["bytes"]["temp"] = held
        doc["ranks"][0]["timings_s"]["forward"] = 0.5 + held
    varying = repeat.varying_fields(runs)
    assert {(v.key.path, v.expected is not None) for v in varying} == {
        ("memory.bytes.temp", True),
        ("timings_s.forward", True),
    }
    assert repeat.format_varying(varying) == ["  2 values declared to vary run to run also differed"]
    for doc in runs:  # simulated: nothing runs asynchronously, so temp is expected to hold still
        doc["environment"]["backend"] = "fake"
    assert [v.key.path for v in repeat.varying_fields(runs) if v.expected is None] == ["memory.bytes.temp"]


def test_repeat_needs_two_runs_and_writes_no_files(capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "--repeat", "1", str(SPEC)])
    assert info.value.code == 2 and "--repeat must be at least 2, got 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--repeat", "3", "--json", "x.json", str(SPEC)])
    assert "--repeat compares runs and writes no files: drop --json" in capsys.readouterr().err
