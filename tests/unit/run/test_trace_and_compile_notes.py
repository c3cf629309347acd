"""``--trace`` on CUDA ranks records the device's activity, and ``compile: true`` under the
harness's dispatch recorder says that the compiled units ran eagerly."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.report.notes import compile_ran_eager_note
from harness.run.rank.instruments import profiler_options, trace_device_activity
from harness.run.rank.observe import compile_counts


def test_the_device_activity_is_recorded_only_for_a_trace_of_a_cuda_rank():
    assert trace_device_activity(tracing=True, device_type="cuda") == "cuda"
    assert trace_device_activity(tracing=False, device_type="cuda") is None  # nothing reads it: no cost
    assert trace_device_activity(tracing=True, device_type="cpu") is None
    assert profiler_options("cuda") == {"use_cpu": True, "use_kineto": True, "use_device": "cuda"}
    assert profiler_options(None) == {"use_cpu": True, "use_kineto": True}


def test_the_options_are_torch_autograd_profilers():
    profiler = torch.autograd.profiler.profile(**profiler_options(None))
    assert [a.name for a in profiler.kineto_activities] == ["CPU"]


class _Passthrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_under_a_dispatch_mode_dynamo_captures_nothing_and_the_rank_says_it_ran_eager():
    """The premise of ``ran_eager``: a compiled function under a dispatch mode (as the step runs
    under the collective recorder), then another without one (backend "eager": no inductor; a
    frame dynamo skipped once stays skipped, hence two functions)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with _Passthrough():
        torch.compile(lambda x: torch.sin(x) + 1, backend="eager")(torch.ones(3))
    assert compile_counts() == {"unique_graphs": 0, "graph_breaks": 0, "ran_eager": True}
    torch.compile(lambda x: torch.cos(x) + 1, backend="eager")(torch.ones(3))
    assert compile_counts()["unique_graphs"] == 1 and not compile_counts()["ran_eager"]
    torch._dynamo.reset()


def test_the_cli_note_names_the_ranks_that_ran_eager():
    def ranks(*flags):
        return {"ranks": [{"rank": r, "compile": {"unique_graphs": 0, "ran_eager": f}} for r, f in enumerate(flags)]}

    note = compile_ran_eager_note(ranks(True, True))
    assert note.startswith("note: setup.fsdp.units[].compile: dynamo compiled no graph on ranks 0, 1:")
    assert "compiled units ran eagerly" in note
    assert compile_ran_eager_note(ranks(False, True)).count("rank 1:") == 1
    assert compile_ran_eager_note(ranks(False, False)) is None
    assert compile_ran_eager_note({"ranks": [{"rank": 0}]}) is None  # no unit asked for compile
