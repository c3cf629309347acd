"""The rank body: what one rank does once its process group exists, real or simulated.

``plan`` decides everything up front from the setup and the world (a pure function, no torch
objects); ``step.run_step`` then goes build -> shard -> instruments -> steps -> observation,
with the two ways a rank can run as small strategies (``strategies``: a real rank, a rank
simulated under the fake backend). ``references`` makes the numerics references, ``observe``
the rank's entry, ``fake`` the simulated rank's storage. Nothing here imports the launching
side (``harness.run.launch``); import-linter keeps it so.
"""
