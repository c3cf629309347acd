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

from hypothesis import settings

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
# hypothesis's --hypothesis-profile option is applied after this file is read, so it wins
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
