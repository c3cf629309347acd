"""Progress on a terminal (launching ranks, forward, backward, optimizer, checking), nothing
when piped or under pytest. Fed by the launcher's per-rank phases (``on_progress``)."""

from __future__ import annotations

import io

from rich.console import Console

from harness.report.progress import STAGES, RunProgress, progress_enabled, stage_of


def test_drawn_only_on_a_terminal_outside_pytest(monkeypatch):
    terminal = Console(file=io.StringIO(), force_terminal=True)
    piped = Console(file=io.StringIO(), force_terminal=False)
    assert not progress_enabled(terminal)  # PYTEST_CURRENT_TEST is set while this test runs
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    assert progress_enabled(terminal)
    assert not progress_enabled(piped)


def test_a_disabled_progress_writes_nothing():
    out = io.StringIO()
    with RunProgress(Console(file=out, force_terminal=False), "walk", 4) as p:
        p.ranks({0: "forward", 1: "backward"})
        p.checking(113)
    assert out.getvalue() == ""


def test_the_line_follows_the_slowest_rank():
    out = io.StringIO()
    with RunProgress(Console(file=out, force_terminal=True, width=120), "walk", 2, enabled=True) as p:
        p.ranks({0: "init_process_group", 1: "starting"})
        assert p._progress.tasks[0].description == "walk: launching ranks"
        p.ranks({0: "backward", 1: "forward"})
        task = p._progress.tasks[0]
        assert task.description == "walk: forward"
        assert task.completed == stage_of("backward") + stage_of("forward") and task.total == 2 * (len(STAGES) - 1)
        p.checking(113)
        assert p._progress.tasks[0].description == "walk: checking 113 entries"
    assert "walk" in out.getvalue()


def test_the_phase_trail_replays_phases_shorter_than_the_poll():
    """A rank that went through forward, backward and optimizer between two polls is reported
    in each of them, in order, while a slower rank stays where it is."""
    import multiprocessing

    from harness.run.launch.phase_trail import PhaseTrail, report_trail

    trail = PhaseTrail(multiprocessing.get_context("spawn"), 2)
    for phase in ("setup", "forward", "backward", "optimizer"):
        trail.enter(0, phase)
    trail.enter(1, "setup")
    calls: list[dict[int, str]] = []
    reported = [0, 0]
    report_trail(trail, reported, calls.append)
    assert [c[0] for c in calls] == ["setup", "forward", "backward", "optimizer"]
    assert {c[1] for c in calls} == {"setup"}
    trail.enter(1, "forward")
    calls.clear()
    report_trail(trail, reported, calls.append)
    assert calls == [{0: "optimizer", 1: "forward"}]
    for _ in range(PhaseTrail.DEPTH + 3):  # more than the ring holds: the latest DEPTH are kept
        trail.enter(1, "backward")
    assert trail.current(1) == "backward" and len(trail.since(1, 0, trail.counts()[1])) == PhaseTrail.DEPTH
