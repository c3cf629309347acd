"""The session's own collection of ``tests/``, kept for the tests of the suite's collection.

``tests/test_suite.py`` checks that ``--import-mode=importlib`` collects exactly what the default
mode collects, and that ``-m "not slow"`` selects nothing under ``tests/integration/``.
Collecting ``tests/`` costs seconds of CPU per Python; a session that has just collected all of
it in the default mode already holds the items and their markers, so those tests collect once
(importlib) or not at all instead of twice or once. :func:`remember` (from ``tests/conftest.py``'s
collection hook) keeps each node id with its markers' names (what ``-m`` matches);
:func:`whole_tests_folder` gives them only when the session's collection is the same as
``pytest --collect-only tests`` would make, else None (the tests then collect in subprocesses).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import REPO

_ITEMS = pytest.StashKey[dict[str, frozenset[str]]]()
TESTS = REPO / "tests"


def remember(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the node ids of ``items`` under ``tests/`` in their order, each with the names of its
    markers (call once they are marked, before deselection)."""
    config.stash[_ITEMS] = {
        item.nodeid: frozenset(mark.name for mark in item.iter_markers())
        for item in items
        if TESTS in Path(item.path).parents
    }


def _collects_all_of_tests(config: pytest.Config) -> bool:
    """Whether the session collected every file under ``tests/``, in the default import mode:
    an argument that is the checkout or ``tests/`` itself, and nothing that drops files before
    the items exist (``--ignore``, ``--lf``'s file skipping, ``--sw``)."""
    if config.getoption("importmode") != "prepend" or Path(config.rootpath) != REPO:
        return False
    if config.getoption("ignore") or config.getoption("ignore_glob"):
        return False
    if config.getoption("lf", False) or config.getoption("stepwise", False):
        return False
    roots = {(Path(config.invocation_params.dir) / arg).resolve() for arg in config.args if "::" not in arg}
    return bool(roots & {REPO, TESTS})


def whole_tests_folder(config: pytest.Config) -> dict[str, frozenset[str]] | None:
    """The node ids the default mode collected under ``tests/``, in collection order, each with its
    markers' names; None when this session did not collect all of ``tests/`` in that mode."""
    if not _collects_all_of_tests(config):
        return None
    return config.stash.get(_ITEMS, None)
