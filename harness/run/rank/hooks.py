"""The spec's own hook functions (``setup.hooks``, :mod:`harness.load.hooks`), imported and called on a rank.

The file is imported by path once per rank and run, under a name from its digest, the rank and a count
(two specs' ``hooks.py`` never clash; simulated ranks sharing a process do not share its state), and
called with keyword arguments only (docs/hooks.md).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from harness.load.hooks import HOOK_POINTS, HooksSetup

__all__ = ["HookError", "RunHooks", "load_hooks"]


class HookError(RuntimeError):
    """A spec's hook function raised, could not be imported, or returned what the harness cannot record."""


_IMPORTS = itertools.count()


def _import(hooks: HooksSetup, rank: int) -> ModuleType:
    """A fresh module per rank and run: a simulated rank shares its process with the others, yet its
    hooks' module-level state must be its own, as a real rank's process gives it."""
    name = f"fsdp2_spec_hooks_{hooks.digest[:16] or abs(hash(hooks.file))}_rank{rank}_{next(_IMPORTS)}"
    found = importlib.util.spec_from_file_location(name, hooks.file)
    if found is None or found.loader is None:
        raise HookError(f"rank {rank}: cannot import hooks file {hooks.file!r}")
    module = importlib.util.module_from_spec(found)
    try:
        found.loader.exec_module(module)
    except Exception as exc:
        raise HookError(f"rank {rank}: importing hooks file {hooks.file!r} raised {type(exc).__name__}: {exc}") from exc
    sys.modules[name] = module
    return module


class RunHooks:
    """The hook functions of one setup on one rank; :meth:`call` of a point the setup leaves out does nothing."""

    def __init__(self, hooks: HooksSetup | None, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size
        self.file = hooks.file if hooks is not None else None
        self._names = hooks.named() if hooks is not None else {}
        self._module = _import(hooks, rank) if hooks is not None else None
        module = self._module
        self._functions: dict[str, Callable[..., Any]] = {p: getattr(module, n) for p, n in self._names.items()}
        self.records: list[dict[str, Any]] = []  # the observation's rank.custom: {step_index, values}

    def has(self, point: str) -> bool:
        return point in self._functions

    def call(self, point: str, **kwargs: Any) -> Any:
        """Call hook point ``point``'s function with ``kwargs``, ``rank`` and ``world_size`` (None if unset);
        :class:`HookError`, chained, if it raises."""
        assert point in HOOK_POINTS, point
        function = self._functions.get(point)
        if function is None:
            return None
        try:
            return function(**kwargs, rank=self.rank, world_size=self.world_size)
        except Exception as exc:
            raise HookError(
                f"rank {self.rank}: hook setup.hooks.{point} ({self._names[point]} in {self.file}) "
                f"raised {type(exc).__name__}: {exc}"
            ) from exc

    def call_named(self, name: str, **kwargs: Any) -> Any:
        """Call the file's function ``name`` (a schedule step's ``call``, a unit option's function) likewise;
        :class:`HookError` also without a hooks file."""
        if self._module is None:
            raise HookError(f"rank {self.rank}: the setup calls {name!r} but has no setup.hooks.file")
        try:
            return getattr(self._module, name)(**kwargs, rank=self.rank, world_size=self.world_size)
        except Exception as exc:
            raise HookError(
                f"rank {self.rank}: hooks function {name} (in {self.file}) raised {type(exc).__name__}: {exc}"
            ) from exc

    def loss(self) -> Callable[[Any, Any], Any] | None:
        """The ``loss`` hook as ``f(output, inputs)`` (errors as :meth:`call` says), or None."""
        if not self.has("loss"):
            return None
        function, name = self._functions["loss"], self._names["loss"]

        def loss(output: Any, inputs: Any) -> Any:
            try:
                return function(output=output, inputs=inputs)
            except Exception as exc:
                raise HookError(
                    f"rank {self.rank}: hook setup.hooks.loss ({name} in {self.file}) raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc

        return loss

    def observe(self, model: Any, step_index: int) -> dict[str, Any] | None:
        """The ``observe`` hook's mapping after step ``step_index``, kept in :attr:`records` (None without the
        hook); :class:`HookError` if it raises or returns anything but a mapping of JSON values."""
        values = self.call("observe", model=model, step_index=step_index)
        if values is None and not self.has("observe"):
            return None
        where = f"rank {self.rank}: hook setup.hooks.observe ({self._names['observe']} in {self.file})"
        if not isinstance(values, dict) or not all(isinstance(k, str) for k in values):
            raise HookError(f"{where} returned {type(values).__name__}; expected a mapping of names to JSON values")
        try:
            values = json.loads(json.dumps(values, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise HookError(f"{where} returned a value that is not JSON: {exc}") from None
        self.records.append({"step_index": step_index, "values": values})
        return values


def load_hooks(hooks: HooksSetup | None, rank: int, world_size: int) -> RunHooks:
    """The rank's :class:`RunHooks` (imports the file when the setup names any hook)."""
    return RunHooks(hooks, rank, world_size)
