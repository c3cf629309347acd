"""Which YAML files are specs: one rule for the pytest plugin and ``run DIR``, so that no spec
is dropped silently and no unrelated YAML becomes an error.

A ``.yaml`` / ``.yml`` file is a spec (items, or one load error naming file, line and key) when:

1. it was named itself: on pytest's command line, to ``--fsdp2-specs``, or to ``run``;
2. it lies under a folder given to ``--fsdp2-specs`` or ``run``, or any folder named ``specs``
   (an empty file, or one whose ``tables:`` is mistyped, included);
3. elsewhere, its top level has at least two of :data:`SPEC_KEYS` (read from its first 64 KiB):
   ``spec:`` with ``title:`` is a spec; a CI config or a Kubernetes manifest (``spec:`` alone) is not.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

__all__ = ["SPEC_FOLDER", "SPEC_KEYS", "SUFFIXES", "expand", "is_spec_file", "looks_like_spec", "spec_files"]

SUFFIXES = (".yaml", ".yml")
SPEC_FOLDER = "specs"
"""A folder of this name holds specs only: every YAML file below it is one."""
SPEC_KEYS = ("spec", "title", "document", "setup", "tables")
"""A spec's required top-level keys (harness/schemas/spec.schema.json)."""
SNIFF_BYTES = 65536
_TOP_KEY = re.compile(rb"^(" + b"|".join(k.encode() for k in SPEC_KEYS) + rb")\s*:", re.M)


def looks_like_spec(head: bytes) -> bool:
    """Whether a YAML text (its first bytes) has at least two of :data:`SPEC_KEYS` at its top level."""
    return len(set(_TOP_KEY.findall(head))) >= 2


def _under(path: Path, folders: Iterable[Path]) -> bool:
    return any(path == f or f in path.parents for f in folders)


def is_spec_file(path: Path, named: Iterable[Path] = (), spec_folders: Iterable[Path] = ()) -> bool:
    """Whether the YAML file ``path`` is a spec (module docstring): ``named`` are the files given
    by name, ``spec_folders`` the folders given as spec folders (all resolved paths)."""
    if path.suffix not in SUFFIXES:
        return False
    if SPEC_FOLDER in path.parent.parts:
        return True
    path = path.resolve()
    if path in set(named) or _under(path, spec_folders):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError:
        return False
    return looks_like_spec(head)


def spec_files(folder: Path) -> list[Path]:
    """Every YAML file below ``folder`` (a spec folder: each is a spec), sorted by path; hidden
    files and folders (``.git``, ``.venv``) are left out."""
    found = [p for p in folder.rglob("*") if p.suffix in SUFFIXES and p.is_file()]
    return sorted(p for p in found if not any(part.startswith(".") for part in p.relative_to(folder).parts))


def expand(paths: Iterable[Path]) -> list[Path]:
    """``run`` / ``validate`` arguments as spec files, in argument order: a folder (a spec folder)
    stands for :func:`spec_files` below it, a folder with none stays as it is (loading it then
    fails, naming it: never a silent nothing); a file stands for itself."""
    out: list[Path] = []
    for path in paths:
        found = spec_files(path) if path.is_dir() else []
        out.extend(found or [path])
    return out
