"""Test-suite settings: hypothesis profiles, and the ``spec_observation`` fixture.

Two profiles (README, "Running the tests"):

- ``default``: what ``pytest`` runs, sized for the suite's wall time: hypothesis's own 100
  cases per property; a property whose every case is a simulated FSDP2 run
  (``tests/test_calculator_vs_fake.py``) draws a 25th of that, besides its ``@example`` cases;
- ``thorough``: ten times as many cases everywhere, for a long run before a release or after
  touching the calculator, the expectations or the simulation:
  ``pytest --hypothesis-profile thorough tests/`` (or ``HYPOTHESIS_PROFILE=thorough``).

A property that costs more per case scales its count from the loaded profile
(``settings.default.max_examples``) instead of fixing one, so both profiles keep their meaning.

``spec_observation(spec, setup=None, backend=None)`` gives a test the observation the spec items
are checked against, from the plugin's per-session cache (harness/pytest_plugin.py), so a test
reuses the spec runs instead of launching ranks again.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from harness.pytest_plugin import observation_of

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
# hypothesis's --hypothesis-profile option is applied after this file is read, so it wins
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def spec_observation(request):
    """``spec_observation(spec, setup=None, backend=None)``: the observation document of
    ``spec``'s setup (or ``setup``, on ``backend``), run once per session across workers."""
    return lambda spec, setup=None, backend=None: observation_of(request.config, spec, setup, backend)
