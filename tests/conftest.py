"""Test-suite settings: hypothesis profiles; the slow folders, the order, the no-rank guard; the
``spec_observation`` fixture.

Two profiles (docs/testing.md):

- ``default``: what ``pytest`` runs, sized for the suite's wall time: hypothesis's own 100
  cases per property; a property whose every case is a simulated FSDP2 run
  (``tests/unit/calculator/test_calculator_vs_fake.py``) draws a 25th of that, besides its ``@example`` cases;
- ``thorough``: ten times as many cases everywhere, for a long run before a release or after
  touching the calculator, the expectations or the simulation:
  ``pytest --hypothesis-profile thorough tests/`` (or ``HYPOTHESIS_PROFILE=thorough``).

A property that costs more per case scales its count from the loaded profile
(``settings.default.max_examples``) instead of fixing one, so both profiles keep their meaning.

``spec_observation(spec, setup=None, backend=None)`` gives a test the observation the spec items
are checked against, from the plugin's per-session cache (harness/pytest_plugin/), so a test
reuses the spec runs instead of launching ranks again; ``gloo_observation(spec)`` the observation of
``spec``'s setup on gloo ranks, the spec items' own where they ran on gloo.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from hypothesis import settings

from harness.pytest_plugin import observation_of
from tests.support import collection
from tests.support.no_ranks import sitecustomize as no_ranks

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
# hypothesis's --hypothesis-profile option is applied after this file is read, so it wins
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# A background job of a non-interactive shell (``pytest -n auto &`` in a script) starts with SIGINT
# ignored, and the xdist workers and every CLI a test starts would inherit that: the Ctrl-C tests
# (tests/cli/test_interrupt.py) would then see no Ctrl-C at all. Python's own handler instead,
# as under a terminal; a handler of Python's is reset to the default across exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# --- the layout: integration/ and cli/ launch real ranks, nothing else may ----------------------

HERE = Path(__file__).resolve().parent
# real ranks; the command line in subprocesses (a Python that imports torch each, seconds apiece)
SLOW_FOLDERS = (HERE / "integration", HERE / "cli")
NO_RANKS_DIR = Path(no_ranks.__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config, items):
    """Every item under ``tests/integration/`` (real ranks) and ``tests/cli/`` (the command line in
    subprocesses) is marked ``slow`` by its folder, and so is every spec item (its setup runs on
    real ranks).

    Then the longest items first, so that no worker starts a minute-long run while the others
    are done: what launches ranks (and the hang tests that wait out their timeouts), then the spec
    items (each spec's first item runs its setup), then the rest. The sort is stable: items keep
    their order within a group, so a module's items stay together behind its fixtures.

    The sorted node ids under ``tests/`` are kept with their markers
    (:mod:`tests.support.collection`): the suite's collection tests (``tests/test_suite.py``)
    read them instead of collecting the suite once more."""
    for item in items:
        if may_launch_ranks(item):
            item.add_marker(pytest.mark.slow)
    items.sort(key=_longest_first)
    collection.remember(config, items)


def _longest_first(item: pytest.Item) -> int:
    if item.get_closest_marker("spec"):
        return 1
    return 0 if item.get_closest_marker("slow") else 2


def may_launch_ranks(item: pytest.Item) -> bool:
    """Whether ``item`` is one that may start ranks: a spec item (checked against its setup's run
    on real ranks, the plugin's ``spec`` marker) or a test under ``tests/integration/`` or
    ``tests/cli/``. Every such item is ``slow``; every other launches none, even one marked
    ``slow`` for its time alone."""
    return bool(item.get_closest_marker("spec")) or any(folder in Path(item.path).parents for folder in SLOW_FOLDERS)


@pytest.fixture(autouse=True)
def launches_no_rank_outside_the_rank_folders(request, monkeypatch, tmp_path_factory):
    """A test outside ``tests/integration/`` and ``tests/cli/`` (so every test of the fast tier,
    ``-m "not slow"``) launches no rank, in this process or any it starts
    (``tests/support/no_ranks/sitecustomize.py``); one that does fails, naming what it started."""
    if may_launch_ranks(request.node):
        yield
        return
    log = tmp_path_factory.mktemp("no-ranks") / "launched.txt"
    monkeypatch.setenv(no_ranks.LOG, str(log))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(NO_RANKS_DIR), os.environ.get("PYTHONPATH")])))
    no_ranks.install(monkeypatch.setattr)
    yield
    if log.exists() and log.read_text().strip():
        pytest.fail(
            f"{request.node.nodeid} is outside tests/integration/ and tests/cli/ but launched ranks:\n"
            + log.read_text(),
            pytrace=False,
        )


@pytest.fixture(scope="session")
def spec_observation(request):
    """``spec_observation(spec, setup=None, backend=None, every=False)``: the observation document
    of ``spec``'s setup with the instruments its entries read (``every``: all of them; a test that
    reads fields no entry reads asks for them), or of ``setup`` as given, on ``backend``; run
    once per session across workers."""
    return lambda spec, setup=None, backend=None, every=False: observation_of(
        request.config, spec, setup, backend, every=every
    )


@pytest.fixture(scope="session")
def gloo_observation(spec_observation):
    """``gloo_observation(spec, every=False)``: the observation of ``spec``'s setup on gloo ranks
    (with every instrument where ``every``): the spec items' own run where it was on gloo (a
    machine without a GPU per rank), else one of its own (the key of a run names the backend
    asked for, ``auto`` or ``gloo``, not the one it got)."""

    def observe(spec, every=False):
        try:
            doc = spec_observation(spec, every=every)
        except pytest.skip.Exception:  # the spec's backend needs GPUs this machine has not
            doc = None
        if doc and doc["environment"]["backend"] == "gloo":
            return doc
        return spec_observation(spec, backend="gloo", every=every)

    return observe
