"""Read an observation document back from a ``run --json`` file (``{"torch_version", "results",
"observations": {spec path: document}}``) or a bare ``fsdp2-observation/1`` document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from harness.contract import strict_json
from harness.contract.observation import FORMAT, ObservationError, validate_observation

__all__ = ["ObservationFileError", "read_observation"]


class ObservationFileError(ValueError):
    """The file cannot give an observation for the spec; the message names the file and why."""


def _same_file(a: str, b: Path) -> bool:
    try:
        return Path(a).resolve() == b.resolve()
    except OSError:
        return False


def read_observation(path: str | Path, spec_path: str | Path, setup: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The validated observation of ``spec_path`` in ``path``: the entry recorded under the same file,
    else the one whose setup equals the spec's ``setup.to_dict()``. Raises ObservationFileError:
    unreadable, not JSON, no observation for this spec (lists those held), or not the schema's."""
    path, spec_path = Path(path), Path(spec_path)
    try:
        doc = strict_json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ObservationFileError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ObservationFileError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise ObservationFileError(
            f"{path}: expected a JSON object written by 'harness run --json', got {type(doc).__name__}"
        )
    if doc.get("format") == FORMAT:
        found = doc
    else:
        observations = doc.get("observations")
        if not isinstance(observations, dict) or not observations:
            raise ObservationFileError(
                f"{path}: observations: expected a mapping of spec path -> observation document "
                f"(as 'harness run --json' writes), found none"
            )
        keys = [k for k in observations if _same_file(k, spec_path)]
        if not keys and setup is not None:
            keys = [k for k, v in observations.items() if isinstance(v, dict) and v.get("setup") == dict(setup)]
        if len(keys) != 1:
            raise ObservationFileError(
                f"{path}: observations: no single entry for {spec_path}; it holds {', '.join(sorted(observations))}"
            )
        found = observations[keys[0]]
    try:
        validate_observation(found)
    except ObservationError as exc:
        raise ObservationFileError(f"{path}: {exc}") from None
    return found
