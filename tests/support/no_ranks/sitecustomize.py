"""Refuse launching ranks: a test outside ``tests/integration/`` and ``tests/cli/`` must not start
one, here or in a subprocess.

``tests/conftest.py`` installs :func:`install` in the test's own process and puts this folder
first on ``PYTHONPATH`` with :data:`LOG` set, so every Python the test starts (``python -m harness``,
a pytester run, torchrun) imports this file as its ``sitecustomize`` and refuses too. A rank is
a ``multiprocessing`` process (``harness.run.launch.local.run_local`` starts each rank as one from its
forkserver) or a torchrun; each refusal is also written to the file named by :data:`LOG`, so
the test fails at teardown even where a subprocess swallowed the error.

Self-contained (stdlib only): a subprocess may not have the checkout on ``sys.path``.
"""

from __future__ import annotations

import os

LOG = "FSDP2_TESTS_RANK_LOG"  # the variable naming the refusals file


class RankLaunched(RuntimeError):
    """A test outside tests/integration/ and tests/cli/ started a rank process."""


def _refuse(what: str) -> None:
    path = os.environ.get(LOG)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"pid {os.getpid()}: {what}\n")
    raise RankLaunched(
        f"a test outside tests/integration/ and tests/cli/ launched {what}; real ranks belong in "
        "tests/integration/ (marked slow there)"
    )


def _is_torchrun(args) -> bool:
    argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
    words = " ".join(os.fsdecode(a) for a in argv)
    return "torchrun" in words or "torch.distributed.run" in words


def install(setattr=setattr) -> None:
    """Refuse ``multiprocessing`` process starts and torchrun commands in this process.

    Args:
        setattr: how to replace the attributes (pytest's ``monkeypatch.setattr`` undoes it after the test).
    """
    import subprocess
    from multiprocessing.process import BaseProcess

    def start(self):
        _refuse(f"a multiprocessing process ({self.name}, target {getattr(self, '_target', None)!r})")

    popen_init = subprocess.Popen.__init__

    def init(self, args, *rest, **kwargs):
        if _is_torchrun(args):
            _refuse(f"torchrun ({args!r})")
        popen_init(self, args, *rest, **kwargs)

    setattr(BaseProcess, "start", start)
    setattr(subprocess.Popen, "__init__", init)


if os.environ.get(LOG):
    install()
