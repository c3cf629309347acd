"""Test-suite settings: hypothesis profiles.

Two profiles (README, "Running the tests"):

- ``default``: what ``pytest`` runs, sized for the suite's wall time: hypothesis's own 100
  cases per property; a property whose every case is a simulated FSDP2 run
  (``tests/test_calculator_vs_fake.py``) draws a 25th of that, besides its ``@example`` cases;
- ``thorough``: ten times as many cases everywhere, for a long run before a release or after
  touching the calculator, the expectations or the simulation:
  ``pytest --hypothesis-profile thorough tests/`` (or ``HYPOTHESIS_PROFILE=thorough``).

A property that costs more per case scales its count from the loaded profile
(``settings.default.max_examples``) instead of fixing one, so both profiles keep their meaning.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import settings

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
# hypothesis's --hypothesis-profile option is applied after this file is read, so it wins
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


# --- the layout: integration/ launches real ranks, nothing else may unless marked slow -------------

import pytest  # noqa: E402

from tests.support.no_ranks import sitecustomize as no_ranks  # noqa: E402

INTEGRATION = Path(__file__).resolve().parent / "integration"
NO_RANKS_DIR = Path(no_ranks.__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config, items):
    """Every item under ``tests/integration/`` runs real ranks: marked ``slow`` by its folder."""
    for item in items:
        if INTEGRATION in Path(item.path).parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def launches_no_rank_unless_slow(request, monkeypatch, tmp_path_factory):
    """A test not marked ``slow`` launches no rank, in this process or any it starts
    (``tests/support/no_ranks/sitecustomize.py``); one that does fails, naming what it started."""
    if request.node.get_closest_marker("slow"):
        yield
        return
    log = tmp_path_factory.mktemp("no-ranks") / "launched.txt"
    monkeypatch.setenv(no_ranks.LOG, str(log))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(NO_RANKS_DIR), os.environ.get("PYTHONPATH")])))
    no_ranks.install(monkeypatch.setattr)
    yield
    if log.exists() and log.read_text().strip():
        pytest.fail(f"{request.node.nodeid} is not marked slow but launched ranks:\n{log.read_text()}", pytrace=False)
