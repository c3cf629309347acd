"""A spec's ``setup.model.config`` naming a file: read it, relative to the spec file.

``setup.model.config`` is a name in ``model.KNOWN_CONFIGS`` (or its hub id, e.g.
``Qwen/Qwen3-8B``), an inline mapping of ``Qwen3Config`` fields, or a path to a transformers
``config.json`` (relative to the spec file; a folder holding one works too). A path is
resolved here, at load time: the setup then carries the file's fields as an inline mapping, so
a rank builds the model from the values that were validated (and the run cache keys on them),
and the file's ``torch_dtype`` / ``dtype`` becomes ``setup.model.dtype`` when the spec sets
none. Nothing here imports torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from harness.load.setup import DTYPES
from model.config import known_config_name, read_config_file

CONFIG_KEY = "setup.model.config"


def looks_like_a_path(config: str) -> bool:
    """A config string that can only mean a file: a path separator or a .json/.yaml/.yml name.

    Hub ids ("Qwen/Qwen3-8B") have a slash too; they are matched as names first.
    """
    return "/" in config or "\\" in config or config.endswith((".json", ".yaml", ".yml"))


def resolve_config_file(
    setup: Mapping[str, Any], spec_path: str | Path
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The ``setup:`` mapping with a config file read in, and the problems found.

    Args:
        setup: a spec's ``setup:`` (the keys the schema accepted).
        spec_path: the spec file; a relative config path is resolved from its folder.

    Returns:
        ``(setup, problems)``. When ``setup.model.config`` names a readable, valid file, the
        returned setup has ``model.config`` = the file's ``Qwen3Config`` fields and, if the spec
        has no ``model.dtype``, ``model.dtype`` = the file's dtype. A known name, a mapping or
        a string that is neither a known name nor a path is returned unchanged (the loader's
        config check names the known configs). Problems are ``(key path, message)``; when the
        file fails, the returned setup has no ``model`` (so nothing else is blamed on it).
    """
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
