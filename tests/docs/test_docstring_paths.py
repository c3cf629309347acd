"""Every repository path and ``harness.``/``model.`` module a product docstring names exists.

Files move; a docstring that still points at the old place misleads the next reader (issue 43
found 11 such references). A path is looked up from the repository root, then from each folder
above the module that names it (``recorders/memory.py`` inside ``harness/run/rank/``); a dotted
name must be a module, or a module and a name its source defines. Paths into other projects
(torch's, transformers', nccl-tests') are not ours to check.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support import REPO

PRODUCT = ("harness", "model")
# A path with at least one folder: a bare file name is as often torch's (``mem_tracker.py``) or an
# example (``config.json``) as ours.
PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w-]+\.(?:py|yaml|md|json|toml|txt))\b")
# ``model.layers.0`` is a transformers parameter name, not our package: ``model.`` counts only
# before one of the package's own modules.
DOTTED = re.compile(r"(?<![\w.])(harness(?:\.\w+)+|model\.(?:config|names|steps|qwen3|qwen3_moe)(?:\.\w+)*)")
FOREIGN = ("torch/", "transformers/", "models/", "doc/", "c10/", "src/", "test/", "torchtitan/")
EXAMPLES = {"specs/x.yaml"}


def _docstrings(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.lineno if hasattr(node, "lineno") else 1, doc


def _path_exists(name: str, module: Path) -> bool:
    folders = [REPO, *[p for p in module.parents if REPO in p.parents or p == REPO]]
    return any((folder / name).exists() for folder in folders)


def _dotted_exists(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:cut])
        for found in (base.with_suffix(".py"), base / "__init__.py"):
            if found.exists():
                rest = parts[cut:]
                return not rest or (base / f"{rest[0]}.py").exists() or _defines(found.read_text(), rest[0])
    return False


def _defines(source: str, name: str) -> bool:
    """``name`` is defined or imported at the top of ``source``."""
    pattern = rf"^(?:def|class)\s+{name}\b|^{name}\b\s*[:=]|^from .* import .*\b{name}\b|^\s+{name},$"
    return re.search(pattern, source, re.M) is not None


def _stale(module: Path) -> list[str]:
    out = []
    for line, doc in _docstrings(ast.parse(module.read_text())):
        for name in PATH.findall(doc):
            if name.startswith(FOREIGN) or name in EXAMPLES:
                continue
            if not _path_exists(name, module):
                out.append(f"{module.relative_to(REPO)}:{line}: path {name}")
        for name in DOTTED.findall(doc):
            if not _dotted_exists(name.rstrip(".")):
                out.append(f"{module.relative_to(REPO)}:{line}: module {name}")
    return out


MODULES = sorted(p for package in PRODUCT for p in (REPO / package).rglob("*.py"))


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_a_docstring_names_exists(module: Path):
    assert _stale(module) == []
