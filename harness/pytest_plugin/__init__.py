"""pytest plugin (entry point ``pytest11``): every entry of a spec is one test item.

It collects the YAML files that are specs (harness/load/spec_files.py's rule, shared with ``run DIR``)
and runs each distinct setup once per session across the xdist workers
(harness/pytest_plugin/cache.py). Collection and scheduling: docs/testing.md, "The spec plugin".
Every option is prefixed ``--fsdp2-`` so that it cannot clash with another plugin's."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from pathlib import Path
from typing import Any, Callable, NamedTuple

import pytest

from harness.contract.names import BACKENDS
from harness.judge.checks import CheckResult
from harness.judge.evaluate import FAILING, evaluate_item
from harness.load.backend_choice import chosen_backend, kept_backend_note
from harness.load.instrument_choice import chosen_setup
from harness.load.spec import Spec, SpecError, SpecItem, load_spec
from harness.load.spec_files import is_spec_file
from harness.pytest_plugin.cache import CachedRunError, cached_run, gpu_lock_path, one_at_a_time, run_key
from harness.report.junit import table_slug
from harness.run.gates import gpu_gate
from harness.run.gpus import visible_gpu_count
from harness.run.preflight import PYTEST_OPTIONS, PreflightError


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fsdp2", "FSDP2 conformance specs")
    group.addoption(
        "--fsdp2-specs",
        action="append",
        default=[],
        metavar="PATH",
        help="a spec file or a folder of specs to collect (repeatable), besides pytest's own paths",
    )
    group.addoption(
        "--fsdp2-backend",
        default=None,
        choices=BACKENDS,
        help="process-group backend for the specs whose backend is auto (default: auto: nccl with one "
        "GPU per rank when enough GPUs are visible, gloo otherwise); a spec pinned to another "
        "keeps it unless --fsdp2-force-backend",
    )
    group.addoption(
        "--fsdp2-force-backend",
        action="store_true",
        default=False,
        help="apply --fsdp2-backend also to specs pinned to a backend (the pin is part of what they check)",
    )
    group.addoption(
        "--fsdp2-run-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds before a spec's run is declared hung (default: the spec's timeout_s, else 300)",
    )
    group.addoption(
        "--fsdp2-no-preflight",
        action="store_true",
        default=False,
        help="skip the check that this machine can hold each spec's run (processes, memory per rank)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spec: a conformance item generated from a spec entry")
    config.addinivalue_line("markers", "drafted: written by 'harness draft', not yet reviewed against a document")
    if config.getoption("--fsdp2-specs"):
        config.args.extend(str(Path(p)) for p in config.getoption("--fsdp2-specs"))


_SESSION_SPECS = pytest.StashKey[list]()


def _larger_worlds_first(spec: Spec) -> int:
    """The sort key of the session's specs: the larger worlds' setups are the long ones."""
    return -spec.setup.world_size


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The spec items of the larger worlds first (their setups are the long ones), each spec's items
    together and in file order; other items keep their place."""
    places = [i for i, item in enumerate(items) if isinstance(item, SpecEntryItem)]
    ordered = sorted((items[i] for i in places), key=lambda item: _larger_worlds_first(item.spec))  # stable
    for i, item in zip(places, ordered):
        items[i] = item


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: the items this process may run
def pytest_collection_finish(session: pytest.Session) -> None:
    """Note the session's specs, larger worlds first, for :func:`observation_of` to run meanwhile."""
    specs = {id(item.spec): item.spec for item in session.items if isinstance(item, SpecEntryItem)}
    session.config.stash[_SESSION_SPECS] = sorted(specs.values(), key=_larger_worlds_first)


def pytest_collect_file(parent: pytest.Collector, file_path: Path):
    named, folders = _given(parent.config)
    if is_spec_file(file_path, named, folders):  # the rule: harness/load/spec_files.py
        return SpecFile.from_parent(parent, path=file_path)
    return None


_GIVEN = pytest.StashKey[tuple]()


def _given(config: pytest.Config) -> tuple[frozenset, tuple]:
    """(files named on the command line or to --fsdp2-specs, folders given to --fsdp2-specs), resolved;
    a file named is collected even if broken."""
    if _GIVEN not in config.stash:
        paths = [Path(a.split("::")[0]).resolve() for a in config.args]
        folders = [Path(p).resolve() for p in config.getoption("--fsdp2-specs")]
        config.stash[_GIVEN] = (
            frozenset(p for p in paths if not p.is_dir()),
            tuple(f for f in folders if f.is_dir()),
        )
    return config.stash[_GIVEN]


class SpecFile(pytest.File):
    """One spec: its tables as collectors, its entries as items (file order, same in every worker)."""

    def collect(self):
        try:
            spec = load_spec(self.path)
        except SpecError as exc:
            yield SpecLoadError.from_parent(self, name="load", error=exc)
            return
        note = kept_backend_note(
            spec.name,
            spec.backend,
            self.config.getoption("--fsdp2-backend"),
            self.config.getoption("--fsdp2-force-backend"),
            force_flag="--fsdp2-force-backend",
        )
        if note:  # pytest's warnings summary shows it once, also from xdist workers
            self.warn(pytest.PytestWarning(note))
        tables: dict[str, list[SpecItem]] = {}
        for item in spec.items:
            tables.setdefault(item.entry.table, []).append(item)
        for title, items in tables.items():
            yield SpecTable.from_parent(self, name=table_slug(title), spec=spec, items=items)


class SpecTable(pytest.Collector):
    def __init__(self, *, spec: Spec, items: list[SpecItem], **kwargs):
        super().__init__(**kwargs)
        self.spec, self.spec_items = spec, items

    def collect(self):
        for item in self.spec_items:
            yield SpecEntryItem.from_parent(self, name=item.entry.id, spec=self.spec, spec_item=item)


class EntryFailed(Exception):
    def __init__(self, result: CheckResult):
        super().__init__(result.explain())
        self.result = result


class SpecEntryItem(pytest.Item):
    def __init__(self, *, spec: Spec, spec_item: SpecItem, **kwargs):
        super().__init__(**kwargs)
        self.spec, self.spec_item = spec, spec_item
        self.add_marker(pytest.mark.spec)
        if spec_item.drafted:
            self.add_marker(pytest.mark.drafted)

    def runtest(self) -> None:
        reason = self.spec_item.skip_reason(*_running_torch())
        if reason:  # this entry's torch range or build excludes the running torch: no run for it
            pytest.skip(reason)
        try:
            observation = observation_of(self.config, self.spec)
        except CachedRunError as exc:
            if str(exc).startswith(_REFUSED) and not _first_to_say(self.config, self.spec, self.nodeid):
                pytest.skip(
                    f"{self.spec.name}: the pre-flight check refused this spec's run "
                    "(said once, by its first item to run)"
                )
            raise
        result = evaluate_item(self.spec_item, observation)
        if result.status == "skip":
            pytest.skip(result.message)
        if result.status == "xfail":
            pytest.xfail(result.message)
        if result.status in FAILING:
            raise EntryFailed(result)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, EntryFailed):
            return str(excinfo.value)
        if isinstance(excinfo.value, CachedRunError) and str(excinfo.value).startswith(_REFUSED):
            refusal = str(excinfo.value).removeprefix(_REFUSED).strip()
            return (
                f"{self.spec.path}: the pre-flight check refused this spec's run, nothing was started "
                f"(said once; its other items skip):\n  {refusal}"
            )
        if isinstance(excinfo.value, CachedRunError):
            e = self.spec_item.entry
            return f"{e.spec}:{e.line}: [{e.table}] {e.id}\n  the run of this spec's setup failed:\n{excinfo.value}"
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        e = self.spec_item.entry
        return self.path, max(e.line - 1, 0), f"{self.spec.name}: {e.table}: {e.id}"


class SpecLoadError(pytest.Item):
    def __init__(self, *, error: SpecError, **kwargs):
        super().__init__(**kwargs)
        self.error = error

    def runtest(self) -> None:
        raise self.error

    def repr_failure(self, excinfo, style=None):
        return f"spec does not load: {self.error}"

    def reportinfo(self):
        return self.path, max(self.error.line - 1, 0), f"load {self.path.name}"


_REFUSED = f"{PreflightError.__name__}:"
"""How a recorded run error that is a pre-flight refusal begins (``harness.pytest_plugin.cache`` writes the type)."""


def _first_to_say(config: pytest.Config, spec: Spec, nodeid: str) -> bool:
    """Whether this item is the first of ``spec``'s, in any worker, to report its refusal (an O_EXCL file)."""
    folder = _shared_cache_dir(config)
    folder.mkdir(parents=True, exist_ok=True)
    claim = folder / f"refused-{hashlib.sha256(str(spec.path).encode()).hexdigest()[:20]}.said"
    try:
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(nodeid)
    return True


def _shared_cache_dir(config: pytest.Config) -> Path:
    base = config._tmp_path_factory.getbasetemp()  # xdist workers: <session basetemp>/popen-gwN
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "fsdp2-runs"


@functools.cache
def _running_torch() -> tuple[str, str]:
    """(torch version, build: "cpu" or "cuda") of this worker's torch (``harness.run.gates``)."""
    from harness.run.gates import running_torch

    return running_torch()


@functools.cache
def _gpu_count() -> int:
    """GPUs this worker's ranks would see, counted through NVML (no CUDA context in the worker)."""
    return visible_gpu_count()


def observation_of(
    config: pytest.Config, spec: Spec, setup=None, backend: str | None = None, *, every: bool = False
) -> dict:
    """The observation of ``spec``'s setup (or ``setup``) on ``backend`` with the instruments its entries
    read (``every``: all), run once per session across workers (harness/pytest_plugin/cache.py).
    Skips a spec gated out whole (``harness.run.gates``); raises CachedRunError when the run failed."""
    planned = _planned_run(config, spec, setup, backend, every=every)
    return cached_run(
        planned.cache_dir,
        planned.key,
        planned.run,
        lock_timeout_s=planned.lock_timeout_s,
        meanwhile=_session_runs(config),
        served_by=planned.served_by,
    )


def _session_runs(config: pytest.Config):
    """(key, run) of each spec setup of the session's items, planned as its items would plan it."""
    stash = getattr(config, "stash", None)  # a bare config (the unit tests' namespace) has no items
    for spec in stash.get(_SESSION_SPECS, []) if stash is not None else []:
        try:
            planned = _planned_run(config, spec)
        except pytest.skip.Exception:  # needs GPUs this machine has not: its items skip
            continue
        yield planned.key, planned.run


class _Planned(NamedTuple):
    cache_dir: Path
    key: str
    run: Callable[[], Any]
    lock_timeout_s: float
    served_by: tuple[str, ...]  # the same run with every instrument: it holds every field this one records


def _planned_run(
    config: pytest.Config, spec: Spec, setup=None, backend: str | None = None, *, every: bool = False
) -> _Planned:
    """The cached run of ``spec``'s setup (or ``setup``) on ``backend``, with the instruments it reads."""
    import torch

    from harness.run.runner import run_setup

    setup = setup or chosen_setup(spec, every=every)
    backend = backend or chosen_backend(
        spec.backend, config.getoption("--fsdp2-backend"), config.getoption("--fsdp2-force-backend")
    )
    gpus = _gpu_count() if backend in ("auto", "nccl") else 0
    reason = spec.skip_reason(*_running_torch()) or gpu_gate(backend, setup.world_size, gpus)
    if reason:  # decided before anything runs (harness.run.gates), as under ``run``
        pytest.skip(reason)
    timeout_s = config.getoption("--fsdp2-run-timeout") or spec.timeout_s
    lock_timeout_s = timeout_s * 3 + 120
    key = run_key(setup, backend, torch.__version__)
    served_by = () if setup.instruments is None else (run_key(_every(setup), backend, torch.__version__),)

    def run():
        try:
            return run_setup(
                setup, backend=backend, timeout_s=timeout_s, preflight=not config.getoption("--fsdp2-no-preflight")
            )
        except PreflightError as exc:  # its advice in this plugin's option names
            raise exc.for_options(PYTEST_OPTIONS) from None

    cache_dir = _shared_cache_dir(config)
    if backend == "nccl" or (backend == "auto" and gpus >= setup.world_size):
        lock_timeout_s *= int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))  # queued behind the others' runs
        run = functools.partial(
            one_at_a_time,
            gpu_lock_path(cache_dir, os.environ.get("CUDA_VISIBLE_DEVICES")),
            run,
            lock_timeout_s=lock_timeout_s,
        )
    return _Planned(cache_dir, key, run, lock_timeout_s, served_by)


def _every(setup):
    return dataclasses.replace(setup, instruments=None)
