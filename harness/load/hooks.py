"""Extension points: ``setup.hooks`` names Python functions in a file beside the spec.

A hook pins what the declarative setup cannot say (freeze a layer after build, a custom loss, a
custom observation); the harness keeps launching, recorders, the numerics reference and the report.
The rank imports ``setup.hooks.file`` (``harness.run.rank.hooks``) and calls each named top-level
function with keyword arguments (docs/hooks.md). Loading stays torch-free: :func:`resolve_hooks`
parses the file (``ast``, nothing imported) and checks that each named function is defined there.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.load.declare import key

__all__ = ["FUNCTION_NAME", "HOOK_POINTS", "HooksSetup", "resolve_hooks"]

HOOK_POINTS = (
    "after_build",
    "after_fully_shard",
    "before_step",
    "after_step",
    "before_microbatch",
    "after_microbatch",
    "loss",
    "observe",
)
"""The hook keys, in the order a rank reaches them (``loss`` and ``observe`` per forward / step)."""

FUNCTION_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""What a key naming a function of the hooks file matches (hook points, a schedule ``call``, unit options)."""

_NAME = {"type": "string", "pattern": FUNCTION_NAME}


def _name(doc: str) -> str | None:
    return key(None, doc=doc, **_NAME)


@dataclass(frozen=True)
class HooksSetup:
    """Python functions of a file beside the spec, called at fixed points of each rank's run.

    ``file`` is relative to the spec's folder (absolute once loaded); ``digest``, set by the loader,
    is the sha256 of its bytes (part of the run cache key; not a spec key).
    """

    file: str = key(required=True, doc="the Python file of the hook functions, relative to the spec's folder")
    after_build: str | None = _name(
        "called as f(model, rank, world_size) after the model is built, before any "
        "fully_shard call (the numerics replica gets the same call)"
    )
    after_fully_shard: str | None = _name(
        "called as f(model, unit, module, rank, world_size) after each fully_shard "
        "call (unit: its FQN, 'root' for the root)"
    )
    before_step: str | None = _name(
        "called as f(model, step_index, rank, world_size) before each step (the "
        "schedule's reference gets the same call)"
    )
    after_step: str | None = _name(
        "called as f(model, step_index, rank, world_size) after each step's optimizer "
        "step (the schedule's reference gets the same call)"
    )
    before_microbatch: str | None = _name(
        "called as f(model, step_index, microbatch, rank, world_size) before each "
        "microbatch's forwards (the schedule's reference gets the same call)"
    )
    after_microbatch: str | None = _name(
        "called as f(model, step_index, microbatch, rank, world_size) after each "
        "microbatch's backward (the schedule's reference gets the same call)"
    )
    loss: str | None = _name(
        "the loss: f(output, inputs) -> scalar tensor, in place of the body's (the numerics reference uses it too)"
    )
    observe: str | None = _name(
        "called as f(model, step_index, rank, world_size) after each step; returns a mapping "
        "of JSON values recorded as rank.custom and checked by check kind custom"
    )
    digest: str = ""

    def named(self) -> dict[str, str]:
        """Hook point -> function name, for the points this setup names."""
        return {p: getattr(self, p) for p in HOOK_POINTS if getattr(self, p) is not None}


def _top_level_functions(tree: ast.Module) -> set[str]:
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def resolve_hooks(
    hooks: HooksSetup, spec_path: str | Path, calls: Sequence[tuple[str, str]] = ()
) -> tuple[HooksSetup, list[tuple[str, str]]]:
    """``hooks`` with ``file`` made absolute and its digest set, and the problems found, as
    (key path, message): the file missing or not Python (a syntax error, with its line), a
    named function not defined at its top level. ``calls``: (key path, function name) of the
    schedule steps' ``call`` keys, checked alike. Nothing is imported."""
    file = (Path(spec_path).parent / hooks.file).resolve()
    where = "setup.hooks.file"
    try:
        source = file.read_bytes()
    except OSError as exc:
        return hooks, [(where, f"cannot read hooks file {str(file)!r}: {exc.strerror or exc}")]
    try:
        tree = ast.parse(source, filename=str(file))
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        at = f" line {line}" if line else ""
        return hooks, [(where, f"hooks file {str(file)!r}{at} is not valid Python: {getattr(exc, 'msg', exc)}")]
    defined = _top_level_functions(tree)
    problems = [
        (
            f"setup.hooks.{point}",
            f"{name!r} is not a top-level function of {hooks.file!r}; defined there: {sorted(defined)}",
        )
        for point, name in hooks.named().items()
        if name not in defined
    ]
    problems += [
        (where_, f"{name!r} is not a top-level function of {hooks.file!r}; defined there: {sorted(defined)}")
        for where_, name in calls
        if name not in defined
    ]
    return dataclasses.replace(hooks, file=str(file), digest=hashlib.sha256(source).hexdigest()), problems
