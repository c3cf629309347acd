"""harness/run/launch/teardown.py: the registry of started ranks and every way out that stops them.

Ranks stand in as small Python subprocesses behind the ``multiprocessing.Process`` methods the
registry uses (a test here must not start a multiprocessing process: tests/support/no_ranks).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from harness.run.launch import teardown
from tests.support.cli import harness_env
from tests.support.processes import running

# ready once its handler is set: a process that takes SIGTERM (or ignores it) from the start
SLEEPER = "import signal, sys, time\n{handler}\nprint('ready', flush=True)\ntime.sleep(120)\n"


class Sleeper:
    """A subprocess seen through ``multiprocessing.Process``'s is_alive/terminate/kill/join/pid."""

    def __init__(self, ignore_sigterm: bool = False):
        handler = "signal.signal(signal.SIGTERM, signal.SIG_IGN)" if ignore_sigterm else ""
        self.popen = subprocess.Popen(
            [sys.executable, "-c", SLEEPER.format(handler=handler)], stdout=subprocess.PIPE, text=True
        )
        assert self.popen.stdout.readline() == "ready\n"
        self.pid = self.popen.pid

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def terminate(self) -> None:
        self.popen.terminate()

    def kill(self) -> None:
        self.popen.kill()

    def join(self, timeout: float | None = None) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass


@pytest.fixture
def sleepers():
    made: list[Sleeper] = []
    yield lambda **kw: made.append(Sleeper(**kw)) or made[-1]
    for s in made:
        s.kill()
        s.join()
        teardown.forget(s)


def test_stop_terminates_joins_and_forgets(sleepers):
    ranks = [sleepers(), sleepers()]
    for r in ranks:
        teardown.register(r)
    assert set(teardown.registered()) >= {r.pid for r in ranks}
    teardown.stop(ranks)
    assert [r.popen.returncode for r in ranks] == [-signal.SIGTERM] * 2
    assert not set(teardown.registered()) & {r.pid for r in ranks}


def test_stop_kills_a_rank_that_outlives_the_grace(sleepers):
    stubborn = sleepers(ignore_sigterm=True)
    teardown.register(stubborn)
    started = time.monotonic()
    teardown.stop([stubborn], grace_s=0.3)
    assert stubborn.popen.returncode == -signal.SIGKILL
    assert 0.3 <= time.monotonic() - started < 10
    assert stubborn.pid not in teardown.registered()


def test_stop_ignores_a_rank_already_gone(sleepers):
    gone = sleepers()
    gone.kill()
    gone.join()
    teardown.stop([gone])  # no error
    assert gone.popen.returncode == -signal.SIGKILL


def test_cancel_hard_exit_removes_one_clean_up_and_tolerates_absence():
    teardown.at_hard_exit(print, "x")
    teardown.cancel_hard_exit(print, "x")
    teardown.cancel_hard_exit(print, "x")  # absent: no error
    assert (print, ("x",)) not in teardown._HARD_EXIT


def test_exit_now_announces_kills_the_ranks_cleans_up_and_exits_with_the_status(tmp_path):
    """In a Python of its own (``exit_now`` ends the process): an ignored SIGTERM does not save the
    registered rank, a clean-up's error does not stop the others, no exit handler runs."""
    folder = tmp_path / "session"
    folder.mkdir()
    program = textwrap.dedent(
        f"""
        import atexit, shutil, sys
        sys.path.insert(0, {str(os.path.dirname(__file__))!r})
        from harness.run.launch import teardown
        from test_teardown import Sleeper
        rank = Sleeper(ignore_sigterm=True)
        print(rank.pid, flush=True)
        teardown.register(rank)
        teardown.announce_exit(lambda status: print("announced", status, flush=True))
        teardown.at_hard_exit(shutil.rmtree, {str(folder)!r})
        teardown.at_hard_exit(int, "not a number")  # raises: ignored
        atexit.register(print, "an exit handler ran")
        teardown.exit_now(143)
        print("returned")
        """
    )
    env = harness_env()
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60)
    pid, *rest = proc.stdout.splitlines()
    assert (proc.returncode, rest) == (143, ["announced 143"]), proc.stderr
    deadline = time.monotonic() + 5
    while running([int(pid)]) and time.monotonic() < deadline:  # re-parented to init, reaped there
        time.sleep(0.05)
    assert running([int(pid)]) == []
    assert not folder.exists()


TRACKER = """
import os, subprocess, sys, time
from multiprocessing import resource_tracker
from harness.run.launch import teardown
resource_tracker.ensure_running()
tracker = resource_tracker._resource_tracker
pid, fd = tracker._pid, tracker._fd
holder = None
if {hold}:  # a process holding the tracker's pipe, as an unstopped rank did
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=[fd])
started = time.monotonic()
ended = teardown.wait_resource_tracker(limit_s=0.5)
print(ended, round(time.monotonic() - started, 2), tracker._pid, flush=True)
if holder is not None:
    holder.kill()
    holder.wait()
    for _ in range(100):  # its pipe closed: the tracker ends on its own
        if os.waitpid(pid, os.WNOHANG)[0]:
            print("tracker ended")
            break
        time.sleep(0.05)
"""


@pytest.mark.parametrize("hold", [False, True], ids=["nobody-holds-its-pipe", "a-process-holds-its-pipe"])
def test_wait_resource_tracker_is_bounded(hold):
    proc = subprocess.run(
        [sys.executable, "-c", TRACKER.format(hold=hold)],
        capture_output=True,
        text=True,
        env=harness_env(),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    first, *rest = proc.stdout.splitlines()
    ended, seconds, pid = first.split()
    assert pid == "None"  # forgotten either way: multiprocessing's own exit handler does not wait again
    if hold:
        assert ended == "False" and 0.5 <= float(seconds) < 5
        assert rest == ["tracker ended"]
    else:
        assert ended == "True" and float(seconds) < 5
