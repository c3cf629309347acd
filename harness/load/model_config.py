"""A spec's ``setup.model.config`` naming a file: read it, relative to the spec file.

A path (to a transformers ``config.json``, or a folder holding one) is resolved at load time: the
setup then carries the file's fields as an inline mapping, so a rank builds the model from the
values that were validated (and the run cache keys on them). Nothing here imports torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from harness.load.setup import DTYPES
from model.config import known_config_name, read_config_file

CONFIG_KEY = "setup.model.config"


def looks_like_a_path(config: str) -> bool:
    """A config string that can only mean a file: a separator or a .json/.yaml/.yml name (hub ids: names)."""
    return "/" in config or "\\" in config or config.endswith((".json", ".yaml", ".yml"))


def resolve_config_file(
    setup: Mapping[str, Any], spec_path: str | Path
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``setup`` (the keys the schema accepted) with a config file read in, and the problems found as
    ``(key path, message)``. A relative path is resolved from ``spec_path``'s folder; a valid file
    gives ``model.config`` = its ``Qwen3Config`` fields and, where the spec has none, ``model.dtype`` =
    its dtype. Anything but a path comes back unchanged; when the file fails, the setup comes back
    without ``model`` (so nothing else is blamed on it)."""
    setup = dict(setup)
    model = setup.get("model")
    config = model.get("config") if isinstance(model, Mapping) else None
    if not isinstance(config, str) or known_config_name(config) is not None:
        return setup, []
    file = Path(spec_path).parent / config
    if not looks_like_a_path(config) and not file.exists():
        return setup, []  # an unknown name: the loader says which names are known
    try:
        read = read_config_file(file)
    except ValueError as exc:
        del setup["model"]
        return setup, [(CONFIG_KEY, f"config file {exc}")]
    model = {**model, "config": read.config.to_dict()}
    if "dtype" not in model and read.dtype is not None:
        if read.dtype not in DTYPES:
            del setup["model"]
            return setup, [
                (
                    CONFIG_KEY,
                    f"config file {read.path}: dtype {read.dtype!r} is not one the harness "
                    f"runs ({', '.join(DTYPES)}); set setup.model.dtype",
                )
            ]
        model["dtype"] = read.dtype
    setup["model"] = model
    return setup, []
