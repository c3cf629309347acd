"""Launching ranks and supervising them to the end, one module per job: the local world, the joined
one (torchrun), the simulated one, and what they share (signals, teardown, hang diagnosis).
The rank body (``harness.run.rank``) sits below: it never imports this package."""
