"""Lines the CLI adds after a run's report: what the observation says about how the run ran
that no entry checks. Torch-free; each a pure function of the observation document."""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["compile_ran_eager_note"]


def compile_ran_eager_note(observation: Mapping[str, Any]) -> str | None:
    """One line when a unit asked for ``torch.compile`` and dynamo captured no graph on a rank
    (``compile.ran_eager``: under the collective recorder's ``TorchDispatchMode`` it compiles
    nothing, so the observation is eager FSDP2's); else None."""
    eager = [r["rank"] for r in observation.get("ranks", []) if (r.get("compile") or {}).get("ran_eager")]
    if not eager:
        return None
    which = f"rank {eager[0]}" if len(eager) == 1 else f"ranks {', '.join(map(str, eager))}"
    return (
        f"note: setup.fsdp.units[].compile: dynamo compiled no graph on {which}: the harness's collective "
        "recorder (a TorchDispatchMode) is active during the step and dynamo compiles nothing under one, so the "
        "compiled units ran eagerly; what was observed is eager FSDP2"
    )
