"""Recorders: what one rank observes during the step, each from torch's own signals.

None keeps a torch object past the call that produced it, issues a collective
(``tests/integration/test_passive_instruments.py``) or decides pass or fail: they write fields of
``harness/contract/observation.schema.json``.
"""
