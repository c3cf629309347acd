"""Progress on a real (and a simulated) run: every rank is reported through forward, backward, optimizer."""

from __future__ import annotations

import pytest

from harness.load.setup import ModelSetup, RunSetup
from harness.run.runner import run_setup


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["gloo", "fake"])
def test_the_launcher_reports_every_rank_through_the_step(backend):
    """A small real (or simulated) run: every rank is reported going through forward,
    backward and optimizer, in that order."""
    setup = RunSetup(
        model=ModelSetup("walkthrough", {"num_hidden_layers": 1}, "decoder_layers"), mesh_shape=(2,), numerics=False
    )
    seen: dict[int, list[str]] = {}

    def on_progress(phases):
        for rank, phase in phases.items():
            if not seen.setdefault(rank, []) or seen[rank][-1] != phase:
                seen[rank].append(phase)

    run_setup(setup, backend=backend, timeout_s=300, on_progress=on_progress)
    assert sorted(seen) == [0, 1]
    for rank, phases in seen.items():
        steps = [p for p in phases if p in ("forward", "backward", "optimizer")]
        assert steps == ["forward", "backward", "optimizer"], (rank, phases)
