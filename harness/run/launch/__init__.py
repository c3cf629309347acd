"""Launching ranks and supervising them to the end, one module per job.

- ``local``: the local world, ``setup.world_size`` rank processes forked here and supervised
  (:func:`~harness.run.launch.local.run_local`);
- ``joined``: the world torchrun (or any launcher) set up, this process one rank of it;
- ``simulated``: the fake backend, every observed rank simulated in this process;
- ``errors``: ``RunError``, ``RunTimeout``, ``exception_line``;
- ``session``: this process's temporary folder and the ``/proc`` sweep of dead ones' folders;
- ``forkserver``: the preloaded forkserver's lifetime;
- ``teardown``: the registry of started ranks, stopped on every way out; the exit at once;
- ``held_signals``: Ctrl-C and SIGTERM held back to a point where raising is safe;
- ``rank_process``: a local rank process's main;
- ``phase_trail``: the ranks' phases in shared memory (codes of ``harness.contract.names.RANK_PHASES``);
- ``hang``: each rank's last collectives and the verdict on a hang;
- ``flight_recorder``: PyTorch's NCCL flight recorder, enabled and dumped;
- ``backend``: ``auto``/``gloo``/``nccl`` to a process-group backend and device.

The rank body (``harness.run.rank``) sits below: it never imports this package.
"""
