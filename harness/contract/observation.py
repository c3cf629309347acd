"""The observation document: assembled from the ranks' entries, validated against its schema.

Schema: ``harness/contract/observation.schema.json`` (format ``fsdp2-observation/1``).
:func:`build_observation` puts the parts together; :func:`validate_observation` checks a
document and raises :class:`ObservationError` listing every violation with its JSON path.
Nothing here imports torch.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from harness.contract.partial_values import fill_partial_norms

__all__ = ["FORMAT", "SCHEMA_PATH", "ObservationError", "load_schema", "validate_observation", "build_observation"]

FORMAT = "fsdp2-observation/1"
SCHEMA_PATH = Path(__file__).parent / "observation.schema.json"


class ObservationError(ValueError):
    """A document does not match the observation schema; ``errors`` lists each violation."""

    def __init__(self, errors: list[str]) -> None:
        shown = errors[:20]
        more = f"\n  ... and {len(errors) - len(shown)} more" if len(errors) > len(shown) else ""
        super().__init__(
            f"observation document does not match {SCHEMA_PATH.name} ({len(errors)} errors):\n  "
            + "\n  ".join(shown)
            + more
        )
        self.errors = errors


@lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    """The observation schema (parsed once)."""
    return json.loads(SCHEMA_PATH.read_text())


@lru_cache(maxsize=1)
def _validator() -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(load_schema())


def _path(error: Any) -> str:
    out = "$"
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def validate_observation(doc: Mapping[str, Any]) -> None:
    """Raise :class:`ObservationError` unless ``doc`` matches the schema."""
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        raise ObservationError([f"{_path(e)}: {e.message[:300]}" for e in errors])


def build_observation(
    setup: Any,
    results: list[Mapping[str, Any]],
    *,
    launcher: str,
    simulated: bool,
    environment: Mapping[str, Any] | None = None,
    reloads: list[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The validated document for ``setup`` (a ``RunSetup``) from the ranks' step results.

    Args:
        results: one per observed rank, as ``harness.run.rank.step.run_step`` returns them:
            ``{"environment", "fsdp_units", "entry"}``; entries are sorted by rank. A rank that died
            is ``{"death": ...}`` (``harness.run.launch.local.death_record``), in ``deaths``.
        launcher: "local", "joined" or "simulated".
        simulated: True for the fake backend.
        environment: replaces the first rank's reported environment (torch_version,
            python_version, backend, device_type, device_name); world and mesh come from ``setup``.
            Required where every rank died.
        reloads: the checkpoint loaded by other worlds (``setup.state_dict.reload_world_sizes``),
            each ``{"world_size", "mesh_shape", "mesh_dim_names", "ranks": [{"rank",
            "state_dict", "timings_s"}]}``; None: the key is left out.

    Raises:
        ObservationError: the document does not match the schema (a harness bug).
    """
    deaths = [r["death"] for r in results if "death" in r]  # ranks that died with nothing observed
    results = [r for r in results if "death" not in r]
    if not results and environment is None:
        raise ValueError("every rank died: build_observation needs the launcher's environment")
    environment = environment or results[0]["environment"]
    fsdp_units = results[0]["fsdp_units"] if results else []
    entries = sorted((r["entry"] for r in results), key=lambda e: e["rank"])
    fill_partial_norms(entries, setup.mesh_shape)  # a Partial norm's full value, with no collective
    env = {
        "torch_version": environment["torch_version"],
        # torch.version.cuda: None on a CPU-only build (what a spec's torch_build gates on)
        "torch_cuda_version": environment.get("cuda_version"),
        "python_version": environment["python_version"],
        "backend": environment["backend"],
        "device_type": environment["device_type"],
        "device_name": environment.get("device_name", environment["device_type"]),
        "world_size": setup.world_size,
        "mesh_shape": list(setup.mesh_shape),
        "mesh_dim_names": list(setup.mesh_dim_names),
        "simulated": simulated,
        "launcher": launcher,
        "observed_ranks": [e["rank"] for e in entries],
    }
    doc = {"format": FORMAT, "environment": env, "setup": setup.to_dict(), "fsdp_units": fsdp_units, "ranks": entries}
    if deaths:
        doc["deaths"] = sorted(deaths, key=lambda d: d["rank"])
    if reloads is not None:
        doc["reloads"] = [dict(r, ranks=sorted(r["ranks"], key=lambda e: e["rank"])) for r in reloads]
    validate_observation(doc)
    return doc
