"""The per-session run cache (harness/pytest_plugin/cache.py): one run per key, and a worker that finds
a key's run in another worker's hands runs the session's other setups meanwhile."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from filelock import FileLock

from harness.pytest_plugin.cache import CachedRunError, cached_run


def _counting(calls: list, name: str, result=None):
    def run():
        calls.append(name)
        if result is None:
            raise RuntimeError(f"{name} failed")
        return result

    return run


def test_a_key_runs_once_and_its_error_is_the_same_each_time(tmp_path):
    calls = []
    assert cached_run(tmp_path, "a", _counting(calls, "a", {"v": 1}), lock_timeout_s=5) == {"v": 1}
    assert cached_run(tmp_path, "a", _counting(calls, "a", {"v": 2}), lock_timeout_s=5) == {"v": 1}
    for _ in range(2):
        with pytest.raises(CachedRunError, match="RuntimeError: b failed"):
            cached_run(tmp_path, "b", _counting(calls, "b"), lock_timeout_s=5)
    assert calls == ["a", "b"]


def test_while_another_worker_runs_the_key_this_one_runs_the_free_setups(tmp_path):
    """Another worker holds key k (it is running it); this one runs m1 and m3 (m2 is recorded
    already, m4 is another worker's too, m5 is not needed: k is done by then) and reads k's
    observation once that worker has written it, without running k itself."""
    calls = []
    k_lock, m4_lock = FileLock(str(tmp_path / "k.lock")), FileLock(str(tmp_path / "m4.lock"))
    k_lock.acquire()
    m4_lock.acquire()
    cached_run(tmp_path, "m2", _counting([], "m2", {"m": 2}), lock_timeout_s=5)

    def other_worker_finishes_k():
        (tmp_path / "k.json").write_text(json.dumps({"k": "theirs"}))
        k_lock.release()
        return _counting(calls, "m3", {"m": 3})()

    meanwhile = [
        ("k", _counting(calls, "k as a setup of the session", {"k": "again"})),
        ("m1", _counting(calls, "m1")),  # fails: recorded, and no failure of this call
        ("m2", _counting(calls, "m2 again", {"m": 2})),
        ("m4", _counting(calls, "m4", {"m": 4})),
        ("m3", other_worker_finishes_k),
        ("m5", _counting(calls, "m5", {"m": 5})),
    ]
    observation = cached_run(tmp_path, "k", _counting(calls, "k", {"k": "mine"}), lock_timeout_s=5, meanwhile=meanwhile)
    assert observation == {"k": "theirs"}
    assert calls == ["m1", "m3"]
    with pytest.raises(CachedRunError, match="m1 failed"):
        cached_run(tmp_path, "m1", _counting(calls, "m1 again", {"m": 1}), lock_timeout_s=5)
    assert cached_run(tmp_path, "m3", _counting(calls, "m3 again", {"m": 0}), lock_timeout_s=5) == {"m": 3}
    assert calls == ["m1", "m3"]
    m4_lock.release()


def test_with_nothing_left_to_run_it_waits_on_the_lock_and_times_out(tmp_path):
    from filelock import Timeout

    held = FileLock(str(tmp_path / "k.lock"))
    held.acquire()
    calls = []
    with pytest.raises(Timeout):
        cached_run(
            tmp_path, "k", _counting(calls, "k", {}), lock_timeout_s=0.2, meanwhile=[("m", _counting(calls, "m", {}))]
        )
    assert calls == ["m"]
    held.release()


def test_the_plugin_runs_the_sessions_other_setups_larger_worlds_first_while_it_waits(tmp_path, monkeypatch):
    """observation_of of a setup another worker holds: this worker runs the session's other spec
    setups, the 8-rank one before the 2-rank one, skips the one pinned to nccl (no GPUs here),
    and returns the other worker's observation."""
    import torch

    from harness import pytest_plugin
    from harness.load.instrument_choice import chosen_setup
    from harness.load.setup import RunSetup
    from harness.pytest_plugin.cache import run_key
    from harness.run import runner

    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setattr(pytest_plugin, "_gpu_count", lambda: 0)
    options = {"--fsdp2-backend": None, "--fsdp2-run-timeout": 30, "--fsdp2-no-preflight": True}
    config = SimpleNamespace(
        getoption=options.get,
        _tmp_path_factory=SimpleNamespace(getbasetemp=lambda: tmp_path),
        stash=pytest.Stash(),
    )

    def spec(world, backend="gloo"):
        return SimpleNamespace(
            setup=RunSetup(mesh_shape=(world,)), items=[], backend=backend, timeout_s=30, skip_reason=lambda *_: None
        )

    waited, small, big, pinned = spec(4), spec(2), spec(8), spec(3, "nccl")
    items = []
    for one in (waited, small, big, pinned):  # in collection order; two items of one spec count once
        for _ in range(2):
            item = object.__new__(pytest_plugin.SpecEntryItem)  # only its spec is read
            item.spec = one
            items.append(item)
    pytest_plugin.pytest_collection_finish(SimpleNamespace(config=config, items=items))
    runs = tmp_path / "fsdp2-runs"
    runs.mkdir()
    key = run_key(chosen_setup(waited), "gloo", torch.__version__)
    held = FileLock(str(runs / f"{key}.lock"))
    held.acquire()
    ran = []

    def run_setup(setup, **kw):
        ran.append(setup.world_size)
        if setup.world_size == 2:  # the other worker finishes the waited run meanwhile
            (runs / f"{key}.json").write_text(json.dumps({"theirs": True}))
            held.release()
        return {"world": setup.world_size}

    monkeypatch.setattr(runner, "run_setup", run_setup)
    try:
        observation = pytest_plugin.observation_of(config, waited)
    except pytest.skip.Exception as skipped:  # the pinned spec's skip must not end the waited one's item
        pytest.fail(f"skipped: {skipped}")
    assert observation == {"theirs": True}
    assert ran == [8, 2]


def test_the_plugin_starts_the_larger_worlds_spec_items_first_and_keeps_other_items_in_place():
    """pytest_collection_modifyitems: spec items sorted by world size, largest first, each spec's
    items together in file order; a non-spec item keeps its position."""
    from harness import pytest_plugin
    from harness.load.setup import RunSetup

    def items_of(name, world, n):
        spec = SimpleNamespace(setup=RunSetup(mesh_shape=(world,)), name=name)
        out = []
        for i in range(n):
            item = object.__new__(pytest_plugin.SpecEntryItem)  # only its spec is read
            item.spec, item.label = spec, f"{name}{i}"
            out.append(item)
        return out

    other = SimpleNamespace(label="test")
    items = [*items_of("four", 4, 2), other, *items_of("eight", 8, 2), *items_of("two", 2, 1), *items_of("big", 16, 1)]
    pytest_plugin.pytest_collection_modifyitems(items)
    assert [item.label for item in items] == ["big0", "eight0", "test", "eight1", "four0", "four1", "two0"]


def test_a_key_is_served_by_a_recorded_run_that_holds_everything_it_would(tmp_path):
    """``served_by``: a recorded observation of one of those keys answers without running; a
    failed one or none recorded does not."""
    calls = []
    cached_run(tmp_path, "every", _counting(calls, "every", {"all": True}), lock_timeout_s=5)
    (tmp_path / "failed.error.txt").write_text("RuntimeError: no")
    served = cached_run(
        tmp_path, "subset", _counting(calls, "subset", {"all": False}), lock_timeout_s=5, served_by=["every"]
    )
    assert served == {"all": True}
    ran = cached_run(
        tmp_path, "other", _counting(calls, "other", {"o": 1}), lock_timeout_s=5, served_by=["failed", "x"]
    )
    assert ran == {"o": 1}
    assert calls == ["every", "other"]


def test_the_plugin_keys_a_run_by_its_instruments(tmp_path, monkeypatch):
    """A spec whose entries read only collectives runs with that instrument alone, under a key of
    its own: asking for every instrument runs again; a spec whose run with every instrument is
    recorded first is served by it."""
    from harness import pytest_plugin
    from harness.language.entry import make_entry
    from harness.load.setup import RunSetup
    from harness.run import runner

    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    ran = []
    monkeypatch.setattr(runner, "run_setup", lambda setup, **kw: ran.append(setup.instruments) or {"n": len(ran)})
    options = {"--fsdp2-backend": None, "--fsdp2-run-timeout": 30, "--fsdp2-no-preflight": True}
    config = SimpleNamespace(getoption=options.get, _tmp_path_factory=SimpleNamespace(getbasetemp=lambda: tmp_path))
    entry = make_entry("collectives", {"count": 1}, id="e")

    def spec(world):
        return SimpleNamespace(
            setup=RunSetup(mesh_shape=(world,)),
            items=[SimpleNamespace(entry=entry)],
            backend="gloo",
            timeout_s=30,
            skip_reason=lambda *_: None,
        )

    two, three = spec(2), spec(3)
    assert pytest_plugin.observation_of(config, two) == {"n": 1}
    assert pytest_plugin.observation_of(config, two, every=True) == {"n": 2}  # not served by the subset
    assert pytest_plugin.observation_of(config, two) == {"n": 2}  # both recorded: the one holding more
    assert pytest_plugin.observation_of(config, three, every=True) == {"n": 3}
    assert pytest_plugin.observation_of(config, three) == {"n": 3}  # served by the run with every instrument
    assert ran == [("collectives",), None, None]
