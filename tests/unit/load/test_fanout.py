"""harness/load/fanout.py: results in item order whatever the processes, exceptions where the
item is, every child reaped, no fork where one is unsafe. ``validate`` spread over processes:
tests/cli/test_validate.py.

A pytest-xdist worker runs threads (execnet's), where fan_out rightly never forks: each forking
case runs in a fresh interpreter started here.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from harness.load.fanout import chunks, process_count

from tests.support import REPO
from tests.support.cli import harness_env as _env
SPECS = sorted((REPO / "specs").glob("*.yaml"))


def _python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    prelude = textwrap.dedent("""\
        import os, signal, sys, threading
        from contextlib import closing
        from harness.load.fanout import fan_out
        PARENT = os.getpid()
        def children_left():  # any process whose parent is this one, zombies (not reaped) included
            for entry in os.listdir("/proc"):
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        if entry.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == PARENT:
                            return True
                except (OSError, ValueError):
                    pass
            return False
    """)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], env=_env(), capture_output=True,
                          text=True, timeout=timeout)


def _ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("weights, n, expected", [
    ([1] * 10, 2, [range(0, 5), range(5, 10)]),
    ([1] * 10, 3, [range(0, 4), range(4, 7), range(7, 10)]),
    ([8, 1, 1, 1, 1, 1, 1, 1, 1], 2, [range(0, 1), range(1, 9)]),  # the first item alone is half the weight
    ([100, 1, 1], 3, [range(0, 1), range(1, 1), range(1, 3)]),  # an empty chunk is forked for no one
    ([0, 0, 0], 2, [range(0, 3), range(3, 3)]),
    ([5], 4, [range(0, 1), range(1, 1), range(1, 1), range(1, 1)]),
])
def test_chunks_are_contiguous_and_of_about_equal_weight(weights, n, expected):
    assert chunks(weights, n) == expected


def test_one_process_per_cpu_and_per_six_items_and_none_beside_a_thread():
    # this pytest process may run execnet's threads (xdist), where forking is refused outright
    import threading

    if threading.active_count() > 1:
        assert process_count(48, cpus=16) == 1
        return
    assert (process_count(48, cpus=2), process_count(48, cpus=16), process_count(11, cpus=16),
            process_count(5, cpus=16)) == (2, 8, 1, 1)


def test_results_come_in_item_order_from_every_process():
    out = _ok(_python("""
        for n in (2, 3, 5):
            got = list(fan_out(lambda i: [i * i, os.getpid()], list(range(30)), weights=[1 + i % 4 for i in range(30)],
                               processes=n))
            assert [r[0] for r in got] == [i * i for i in range(30)], got
            assert len({r[1] for r in got}) == n, (n, got)  # computed in n processes
            assert not children_left()
        print("ok")
    """))
    assert out == "ok\n"


def test_an_exception_in_a_childs_item_is_raised_here_at_that_item():
    out = _ok(_python("""
        def fn(i):
            if i == 17:
                raise ValueError(f"item {i} in {'the parent' if os.getpid() == PARENT else 'a child'}")
            return i
        seen = []
        try:
            for r in fan_out(fn, list(range(24)), processes=2):
                seen.append(r)
        except ValueError as exc:
            print(exc, seen == list(range(17)), children_left())
    """))
    assert out == "item 17 in the parent True False\n"


def test_a_child_that_dies_leaves_its_items_to_the_parent():
    out = _ok(_python("""
        def fn(i):
            if i == 20 and os.getpid() != PARENT:
                os.kill(os.getpid(), signal.SIGKILL)
            return [i, os.getpid() == PARENT]
        got = list(fan_out(fn, list(range(24)), processes=2))
        print([i for i, _ in got] == list(range(24)), [i for i, here in got if here and i >= 12], children_left())
    """))
    assert out == "True [20, 21, 22, 23] False\n"


def test_closing_early_kills_and_reaps_the_children():
    out = _ok(_python("""
        import time
        def fn(i):
            if os.getpid() != PARENT:
                time.sleep(30)  # a child that would outlive the caller's interest by far
            return i
        started = time.monotonic()
        with closing(fan_out(fn, list(range(24)), processes=3)) as results:
            first = [next(results) for _ in range(3)]
        print(first, children_left(), time.monotonic() - started < 10)
    """))
    assert out == "[0, 1, 2] False True\n"


def test_no_fork_beside_another_thread_or_where_fork_fails():
    out = _ok(_python("""
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
        beside_thread = {pid for pid in fan_out(lambda i: os.getpid(), list(range(24)))}
        stop.set()
        threading.enumerate()[-1].join()
        def no_fork():
            raise BlockingIOError(11, "Resource temporarily unavailable")
        os.fork = no_fork
        failed_fork = list(fan_out(lambda i: [i, os.getpid()], list(range(24)), processes=2))
        print(beside_thread == {PARENT}, failed_fork == [[i, PARENT] for i in range(24)])
    """))
    assert out == "True True\n"


def test_ctrl_c_in_a_child_is_the_parents_to_report():
    """A child that gets the Ctrl-C exits without a word; its items are computed here."""
    out = _ok(_python("""
        def fn(i):
            if i == 13 and os.getpid() != PARENT:
                raise KeyboardInterrupt
            return i
        print(list(fan_out(fn, list(range(24)), processes=2)) == list(range(24)), children_left())
    """))
    assert out == "True False\n"
