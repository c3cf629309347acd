"""Make one local rank's start stall inside ``Process.start``, for tests of a signal landing there.

A test puts this folder first on ``PYTHONPATH`` with :data:`STALL` set to ``"<rank>:<seconds>"``:
every Python started then imports this file as its ``sitecustomize``, and in the one that launches
ranks (the CLI) the start of each rank ``fsdp2-rank-<r>`` writes its pid to ``<tmp>/rank<r>.started``
(``tempfile.gettempdir()``, i.e. ``$TMPDIR``) once the forkserver has forked it; the start of rank
``<rank>`` then sleeps ``<seconds>`` before ``Process.start`` returns. A signal sent once that file
exists lands where the issue 45 hang began: the rank runs, but its launcher does not yet hold it.

The launching Python's cyclic garbage collector is switched off too. Whether such a rank was left
running depended on it: the parent's end of the rank's lifeline pipe, a local of the interrupted
start, lives as long as the interrupt's traceback, which a reference cycle keeps until the
collector happens to run (in the issue's hung processes it had not). Off, the test sees the worst
case every time, not the collector's timing.

Self-contained (stdlib only): a subprocess may not have the checkout on ``sys.path``.
"""

from __future__ import annotations

import os

STALL = "FSDP2_TESTS_SLOW_RANK_START"


def _install(rank: int, seconds: float) -> None:
    import gc
    import tempfile
    import time
    from multiprocessing import popen_forkserver

    launch = popen_forkserver.Popen._launch

    def stalled_launch(self, process_obj):
        launch(self, process_obj)
        name = process_obj.name
        if name.startswith("fsdp2-rank-"):
            started = os.path.join(tempfile.gettempdir(), f"rank{name.rsplit('-', 1)[1]}.started")
            with open(started + ".part", "w") as f:
                f.write(str(self.pid))
            os.replace(started + ".part", started)  # whole when seen
            if name == f"fsdp2-rank-{rank}":
                time.sleep(seconds)

    popen_forkserver.Popen._launch = stalled_launch
    gc.disable()


if os.environ.get(STALL):
    _rank, _seconds = os.environ[STALL].split(":")
    _install(int(_rank), float(_seconds))
