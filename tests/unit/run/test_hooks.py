"""harness.run.rank.hooks: the spec's file imported by path, each hook called with keywords; a hook
that raises or returns what cannot be recorded fails naming the hook point, function and rank."""

from __future__ import annotations

import pytest

from harness.load.hooks import HooksSetup, resolve_hooks
from harness.run.rank.hooks import HookError, load_hooks

SOURCE = """\
seen = []


def record(model, step_index, rank, world_size):
    seen.append((model, step_index, rank, world_size))


def broken(model, rank, world_size):
    raise KeyError("layers.9")


def values(model, step_index, rank, world_size):
    return {"step": step_index, "rank": rank}


def not_json(model, step_index, rank, world_size):
    return {"x": object()}


def my_loss(output, inputs):
    return output.sum()
"""


def hooks(tmp_path, **points):
    (tmp_path / "h.py").write_text(SOURCE)
    resolved, problems = resolve_hooks(HooksSetup(file="h.py", **points), tmp_path / "spec.yaml")
    assert not problems
    return resolved


def test_a_hook_is_called_with_keywords_and_the_rank(tmp_path):
    run = load_hooks(hooks(tmp_path, before_step="record"), rank=3, world_size=4)
    run.call("before_step", model="m", step_index=1)
    assert run._functions["before_step"].__globals__["seen"] == [("m", 1, 3, 4)]
    assert run.call("after_step", model="m", step_index=1) is None  # not named: nothing called


def test_a_hook_that_raises_names_point_function_file_and_rank(tmp_path):
    run = load_hooks(hooks(tmp_path, after_build="broken"), rank=2, world_size=4)
    with pytest.raises(
        HookError,
        match=r"rank 2: hook setup\.hooks\.after_build \(broken in .*h\.py\) raised "
        r"KeyError: 'layers\.9'",
    ):
        run.call("after_build", model=None)


def test_observe_records_json_values_per_step(tmp_path):
    run = load_hooks(hooks(tmp_path, observe="values"), rank=1, world_size=2)
    run.observe(None, 0)
    run.observe(None, 1)
    assert run.records == [
        {"step_index": 0, "values": {"step": 0, "rank": 1}},
        {"step_index": 1, "values": {"step": 1, "rank": 1}},
    ]


def test_observe_refuses_what_is_not_json(tmp_path):
    run = load_hooks(hooks(tmp_path, observe="not_json"), rank=0, world_size=2)
    with pytest.raises(HookError, match=r"rank 0: hook setup\.hooks\.observe \(not_json .*not JSON"):
        run.observe(None, 0)


def test_the_loss_hook_takes_output_and_inputs(tmp_path):
    loss = load_hooks(hooks(tmp_path, loss="my_loss"), rank=0, world_size=1).loss()
    import torch

    assert float(loss(torch.ones(2, 3), None)) == 6.0


def _raised(function, *args):
    try:
        function(*args)
    except Exception as exc:  # noqa: BLE001 - the exception is the value under test
        return exc
    raise AssertionError("did not raise")


def test_a_hooks_error_is_recorded_with_its_own_type_and_the_hook_named():
    from harness.run.rank.observe import _error_record

    def hook():
        raise ValueError("Expects FSDPModule but got <class 'Qwen3MLP'>")

    def call():
        try:
            hook()
        except Exception as exc:
            raise HookError("rank 0: hook setup.hooks.after_fully_shard (f in h.py) raised ValueError: ...") from exc

    record = _error_record(_raised(call), "setup")
    assert (record["type"], record["qualname"]) == ("ValueError", "builtins.ValueError")
    assert record["message"] == "Expects FSDPModule but got <class 'Qwen3MLP'>"
    assert record["hook"].startswith("rank 0: hook setup.hooks.after_fully_shard")


def test_an_error_not_raised_in_a_hook_names_no_hook():
    plain = _error_record_of(RuntimeError("boom"))
    assert (plain["type"], plain["hook"]) == ("RuntimeError", None)
    unchained = _error_record_of(HookError("hook setup.hooks.observe returned list; expected a mapping"))
    assert (unchained["type"], unchained["hook"]) == ("HookError", None)  # nothing of the hook's own to show


def _error_record_of(exc):
    from harness.run.rank.observe import _error_record

    return _error_record(_raised(lambda: (_ for _ in ()).throw(exc)), "setup")
