"""What the tests (and ``scripts/try_bad_inputs.py``) share, one definition each.

- :data:`REPO`, :data:`SPECS`, :data:`WALKTHROUGH`: the checkout's paths;
- :mod:`support.specs`: spec texts used as bases and :func:`~support.specs.write_spec`;
- :mod:`support.cli`: the command line as a subprocess, as a user runs it;
- :mod:`support.observations`: the synthetic observation of the walkthrough's run (no ranks).
- :mod:`support.ranks`: the rank forkserver started before a timed (hang) run, and its timeout.
- :mod:`support.collection`: this session's collection of ``tests/``, read by ``tests/test_suite.py``.

Imported as ``tests.support`` (``pythonpath = ["."]`` in ``pyproject.toml`` puts the checkout on
``sys.path`` under every import mode).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "specs"
SHIPPED_SPECS = sorted(SPECS.glob("*.yaml"))
WALKTHROUGH = SPECS / "qwen3_walkthrough.yaml"

__all__ = ["REPO", "SPECS", "SHIPPED_SPECS", "WALKTHROUGH"]
