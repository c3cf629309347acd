"""``memory_tracker_blocker``: the setups FSDPMemTracker would change, named once for the run (which
then leaves the tracker off) and the loader (which refuses a ``memory`` entry there)."""

from __future__ import annotations

from pathlib import Path

from harness.contract.instrument_names import memory_tracker_blocker
from harness.load.spec import load_spec

SPECS = Path(__file__).resolve().parents[3] / "specs"


def test_a_plain_setup_runs_the_tracker():
    assert memory_tracker_blocker({}) is None
    assert (
        memory_tracker_blocker({"schedule": {"loss": "mean_square", "steps": [{"forward_method": "forward"}]}}) is None
    )


def test_a_double_backward_and_a_method_call_block_it():
    assert "input_grad_penalty" in memory_tracker_blocker({"schedule": {"loss": "input_grad_penalty", "steps": []}})
    steps = [{}, {"forward_method": "last_hidden_state"}]
    assert "forward_method" in memory_tracker_blocker({"schedule": {"loss": "sum", "steps": steps}})


def test_the_shipped_specs_that_need_it_off():
    for name in ("double_backward_segfault", "forward_method_registered"):
        assert memory_tracker_blocker(load_spec(SPECS / f"{name}.yaml").setup.to_dict()) is not None
    assert memory_tracker_blocker(load_spec(SPECS / "qwen3_walkthrough.yaml").setup.to_dict()) is None
