"""FSDP units as a spec writes them, and the plan they resolve to (no torch import).

``setup.fsdp.units`` is an ordered list of ``fully_shard`` calls, children before their parents
and the root always last (docs/specs.md, "FSDP units"); an option a unit leaves out takes the
``fsdp`` mapping's value, and ``null`` passes nothing (torch's own default). A unit's name is
torch's, from its profiler labels (``FSDPParamGroup._module_fqn``,
``torch/distributed/fsdp/_fully_shard/_fsdp_state.py``, torch 2.13): the module's FQN, or for a
grouped unit its modules' FQNs in ``named_modules()`` order joined by ``", "``; ``""`` is the root.
What only torch can tell (a parent sharded before its child, a shared parameter) is left to the run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

from harness.calculator import DTYPE_BYTES
from harness.language.suggest import closest, did_you_mean
from harness.load.declare import convert_key, key, object_schema
from harness.load.hooks import FUNCTION_NAME

__all__ = [
    "MixedPrecision",
    "OffloadSetup",
    "UnitOptions",
    "UnitSpec",
    "UnitPlan",
    "UNIT_OPTION_KEYS",
    "HOOK_OPTION_KEYS",
    "unit_spec_from_yaml",
    "unit_entry_schema",
    "freeze",
    "resolve_units",
    "match_modules",
    "match_params",
    "unit_label",
    "DTYPES",
    "CHECKPOINT_STYLES",
]

CHECKPOINT_STYLES: tuple[str, ...] = ("composable", "call", "forward")
"""How ``checkpoint: true`` checkpoints a unit's modules (:class:`UnitOptions`)."""

DTYPES: tuple[str, ...] = tuple(DTYPE_BYTES)
"""The dtypes a setup names (model, mixed precision, bandwidth sweep): the calculator's table."""


@dataclass(frozen=True)
class MixedPrecision:
    """``torch.distributed.fsdp.MixedPrecisionPolicy`` fields, as dtype names (None: keep)."""

    param_dtype: str | None = key(None, doc="the dtype parameters are all-gathered in (default: as built)", enum=DTYPES)
    reduce_dtype: str | None = key(
        None, doc="the dtype gradients are reduce-scattered in (default: param_dtype)", enum=DTYPES
    )
    output_dtype: str | None = key(
        None, enum=DTYPES, doc="the dtype of the module's forward outputs (default: not cast)"
    )
    cast_forward_inputs: bool = key(True, doc="cast the forward inputs to param_dtype")


@dataclass(frozen=True)
class OffloadSetup:
    """``torch.distributed.fsdp.CPUOffloadPolicy(pin_memory)``: sharded parameters, gradients
    and optimizer states live on the CPU; pinning needs an accelerator (False on a CPU run)."""

    pin_memory: bool = key(False, doc="pin host memory (needs an accelerator)")


def _shard_placement(value: Any) -> tuple[tuple[str, int], ...]:
    """``{pattern: dim}`` (or its frozen pairs) -> ((pattern, dim), ...)."""
    return tuple((str(k), int(v)) for k, v in (dict(value).items() if value else ()))


@dataclass(frozen=True)
class UnitOptions:
    """One unit's FSDP options: ``fully_shard`` arguments and ``FSDPModule`` setters.

    A unit entry and the ``fsdp`` mapping (every unit's default) take these keys; the rank applies
    them in :mod:`harness.run.rank.parallelize` (a setter: its ``UNIT_SETTERS`` entry).
    """

    reshard_after_forward: bool | int | None = key(
        True,
        null=True,
        doc="fully_shard(reshard_after_forward=): true, false, an int (a group of that size after "
        "forward), or null: not passed, torch's default (true, except the root, which torch leaves unsharded after "
        "forward)",
    )
    mp_policy: MixedPrecision | None = key(
        None, null=True, doc="this unit's MixedPrecisionPolicy; null: none (no casting)"
    )
    offload_policy: OffloadSetup | None = key(
        None,
        null=True,
        doc="this unit's CPUOffloadPolicy: sharded parameters, gradients and optimizer states on "
        "the CPU; null: no offload",
    )
    shard_placement: tuple[tuple[str, int], ...] = key(
        (),
        parse=_shard_placement,
        whole=lambda: {"type": ["object", "null"], "additionalProperties": {"type": "integer", "minimum": 0}},
        doc="shard_placement_fn: parameter FQN pattern (relative to the root; * one component, ** several) -> the "
        "dim it is sharded on, Shard(dim); other parameters Shard(0)",
    )
    ignored_params: tuple[str, ...] = key(
        (),
        doc="fully_shard(ignored_params=): parameter FQN patterns (relative to the root; * one component, ** "
        "several) that FSDP leaves alone: not sharded (a plain tensor, whole on every rank), not all-gathered, its "
        "gradient not reduce-scattered (so each rank keeps its own)",
    )
    gradient_divide_factor: float | None = key(
        None,
        null=True,
        exclusiveMinimum=0,
        doc="set_gradient_divide_factor(f) after fully_shard: gradients become sum/f; null: not called (FSDP "
        "divides by the data-parallel size). On gloo a factor other than the shard-group size needs "
        "force_sum_reduction_for_comms (gloo refuses ReduceOp.PREMUL_SUM)",
    )
    reduce_scatter_divide_factor: float | None = key(
        None,
        null=True,
        exclusiveMinimum=0,
        doc="set_reduce_scatter_divide_factor(f) after fully_shard: torch 2.13's deprecated alias of "
        "set_gradient_divide_factor (it warns, then calls it); set one of the two; null: not called",
    )
    force_sum_reduction_for_comms: bool = key(
        False, doc="set_force_sum_reduction_for_comms(true): reduce with ReduceOp.SUM and divide before/after"
    )
    reshard_after_backward: bool | None = key(
        None, null=True, doc="set_reshard_after_backward(v, recurse=False) after fully_shard; null: not called"
    )
    set_reshard_after_forward: bool | None = key(
        None,
        null=True,
        doc="set_reshard_after_forward(v, recurse=False) after every fully_shard, before the step "
        "(a change at runtime); null: not called",
    )
    unshard_in_backward: bool | None = key(
        None,
        null=True,
        doc="set_unshard_in_backward(v) after fully_shard: false skips the unit's backward all-gather (for a unit "
        "whose backward needs no parameter values, as an embedding's); null: not called (torch: true)",
    )
    is_last_backward: bool | None = key(
        None,
        null=True,
        doc="set_is_last_backward(v) after fully_shard: false keeps FSDP's end-of-backward cleanup from running "
        "(microbatching); it sets the root's shared state, so it acts only on the root unit (a non-root unit's "
        "call is replaced at lazy init); null: not called (torch: true)",
    )
    reduce_scatter_unused_params: bool | None = key(
        None,
        null=True,
        doc="set_reduce_scatter_unused_params(v, recurse=False) after fully_shard: true reduce-scatters a zero "
        "gradient for a parameter that got none in backward (ranks then agree on the collective's size); null: not "
        "called (torch: false, such a parameter is left out)",
    )
    separate_reduce_scatter_group: bool | None = key(
        None,
        null=True,
        doc="set_separate_reduce_scatter_group(v, recurse=False) after fully_shard: true gives the unit's "
        "reduce-scatter a process group of its own over the shard ranks (dist.new_group), to overlap it with "
        "all-gathers; null: not called (torch: the shard group, shared with the all-gather)",
    )
    reduce_scatter_max_input_buffers: int | None = key(
        None,
        null=True,
        minimum=1,
        doc="set_reduce_scatter_max_input_buffers(k, recurse=False) after fully_shard: how many reduce-scatter "
        "input (copy-in) buffers the unit keeps in flight; null: not called (torch: 1)",
    )
    all_reduce_hook: str | None = key(
        None,
        null=True,
        pattern=FUNCTION_NAME,
        doc="set_all_reduce_hook(f) after fully_shard: f is this function of setup.hooks.file, called as "
        "f(reduce_output, rank, world_size) with the unit's reduce-scatter output (the all-reduce's under HSDP), "
        "before FSDP's post-divide; null: not called",
    )
    custom_all_gather: str | None = key(
        None,
        null=True,
        pattern=FUNCTION_NAME,
        doc="set_custom_all_gather(comm) after fully_shard: comm is what this function of setup.hooks.file returns, "
        "called once per unit as f(unit, rank, world_size): an object with allocate(size, *, dtype, device) and "
        "__call__(output_tensor, input_tensor, group, async_op) (torch's AllGather); null: not called",
    )
    custom_reduce_scatter: str | None = key(
        None,
        null=True,
        pattern=FUNCTION_NAME,
        doc="set_custom_reduce_scatter(comm) after fully_shard: comm as for custom_all_gather, its __call__ taking "
        "(output_tensor, input_tensor, group, op, async_op) (torch's ReduceScatter); null: not called",
    )
    allocate_memory_from_process_group_for_comm: bool | None = key(
        None,
        null=True,
        doc="set_allocate_memory_from_process_group_for_comm(v) after fully_shard: staging buffers of the unit's "
        "collectives from the process group's own allocator (NCCL on CUDA; gloo has none, so torch 2.13 falls back "
        "to torch.empty and a CPU run is the default's); null: not called",
    )
    symm_mem_for_comm: str | None = key(
        None,
        null=True,
        enum=["NCCL", None],
        doc="set_symm_mem_for_comm(backend) after fully_shard: all-gather staging buffers from symmetric memory "
        "(CUDA and NCCL only; on a CPU run torch 2.13 raises RuntimeError in the call: no NCCL allocation "
        "backend); null: not called",
    )
    forward_methods: tuple[str, ...] = key(
        (),
        items={"enum": ["last_hidden_state"]},
        uniqueItems=True,
        doc="register_fsdp_forward_method(module, name) after fully_shard, for each name: FSDP's pre- and "
        "post-forward hooks then run around that method as around forward (root only: model.body causal_lm's "
        "root has last_hidden_state; schedule forward_method calls it)",
    )
    checkpoint: bool = key(
        False,
        doc="activation checkpointing on each module of the unit, applied before fully_shard, in the form "
        "checkpoint_style says (default: torch.distributed._composable.checkpoint)",
    )
    checkpoint_style: str = key(
        "composable",
        enum=list(CHECKPOINT_STYLES),
        doc="composable: torch.distributed._composable.checkpoint(module); call: torch.utils.checkpoint.checkpoint "
        "around the module's __call__, FSDP's hooks inside the checkpoint (run again by its recomputation; "
        "transformers 4's GradientCheckpointingLayer); forward: around module.forward, inside FSDP's hooks "
        "(transformers 5's). Needs checkpoint: true",
    )
    checkpoint_use_reentrant: bool = key(
        False,
        doc="use_reentrant= of torch.utils.checkpoint.checkpoint (checkpoint_style call or forward; transformers 4's "
        "gradient_checkpointing_enable defaulted to true, 5.24's to false). Needs checkpoint: true",
    )
    compile: bool = key(False, doc="module.compile() on each module of the unit after fully_shard (slow on CPU)")

    @property
    def divide_factor(self) -> float | None:
        """What the unit's summed gradients are divided by, as set through either setter (None: FSDP's
        default, the data-parallel size)."""
        return (
            self.gradient_divide_factor
            if self.gradient_divide_factor is not None
            else (self.reduce_scatter_divide_factor)
        )


UNIT_OPTION_KEYS: tuple[str, ...] = tuple(f.name for f in fields(UnitOptions))
"""Keys a unit entry (and the ``fsdp`` mapping, as defaults) may set."""

HOOK_OPTION_KEYS: tuple[str, ...] = ("all_reduce_hook", "custom_all_gather", "custom_reduce_scatter")
"""Unit options that name a function of ``setup.hooks.file``."""


def _string_or_list(description: str | None = None) -> dict[str, Any]:
    """A module path, or a non-empty list of them (a number or other value is refused as not a string)."""
    schema: dict[str, Any] = {
        "if": {"type": "array"},
        "then": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "else": {"type": "string"},
    }
    return {"description": description, **schema} if description else schema


def unit_entry_schema() -> dict[str, Any]:
    """The JSON Schema of one ``setup.fsdp.units`` entry: a path or glob, a list, or a mapping of
    ``modules`` and the unit's options (:class:`UnitOptions`' keys)."""
    # an option a unit leaves out takes the fsdp mapping's value, not the dataclass default
    options = {
        name: {k: v for k, v in option.items() if k != "default"}
        for name, option in object_schema(UnitOptions)["properties"].items()
    }
    modules = _string_or_list(
        "a module path or glob (* one path component): one unit per match; or a list of them: "
        "ONE unit of every module named; 'root' (last entry only): the root unit's options"
    )
    return {
        "description": "one entry of setup.fsdp.units: a path or glob (one unit per matching module), a list (one "
        "unit of all the modules it names), or a mapping {modules, options}",
        "if": {"type": "object"},
        "then": {
            "type": "object",
            "additionalProperties": False,
            "required": ["modules"],
            "properties": {"modules": modules, **options},
        },
        "else": _string_or_list(),
    }


@dataclass(frozen=True)
class UnitSpec:
    """One entry of ``setup.fsdp.units`` as written: ``grouped`` for a list (one unit of every match);
    ``given``, the options it sets itself as (key, YAML value) pairs."""

    modules: tuple[str, ...]
    grouped: bool = False
    given: tuple[tuple[str, Any], ...] = ()

    @property
    def is_root(self) -> bool:
        return not self.grouped and self.modules in (("root",), ("",))


@dataclass(frozen=True)
class UnitPlan:
    """One ``fully_shard`` call, resolved: its modules' FQNs in module order, torch's name for it,
    its role ("layer": exactly one decoder layer, whose index ``layer`` holds; "root"; "module"),
    and the ``setup.fsdp.units`` entry it came from (None: the default units)."""

    paths: tuple[str, ...]
    name: str
    role: str
    layer: int | None
    options: UnitOptions = field(default_factory=UnitOptions)
    entry: int | None = None


def unit_label(paths: Sequence[str]) -> str:
    """torch's ``_module_fqn`` for a unit of these modules (already in module order)."""
    return ", ".join(paths)


def _glob(part: str) -> str:
    """One path component of a pattern as a regex: ``*`` any run within the component, ``?`` one
    character of it, ``**`` (parameters only) any run of components."""
    if part == "**":
        return r".*"
    return "".join(r"[^.]*" if c == "*" else r"[^.]" if c == "?" else re.escape(c) for c in part)


def match_modules(pattern: str, module_paths: Sequence[str]) -> list[str]:
    """Module paths matching ``pattern`` (``*`` within one component), in module order."""
    if pattern in ("", "root"):
        return [""] if "" in module_paths else []
    rx = re.compile(r"\.".join(_glob(p) for p in pattern.split(".")) + r"\Z")
    return [p for p in module_paths if p and rx.match(p)]


def match_params(pattern: str, param_fqns: Sequence[str]) -> list[str]:
    """Parameter FQNs matching ``pattern``: ``*`` within one component, ``**`` across several."""
    rx = re.compile(r"\.".join(_glob(p) for p in pattern.split(".")) + r"\Z")
    return [f for f in param_fqns if rx.match(f)]


def unit_spec_from_yaml(value: Any) -> UnitSpec:
    """A ``setup.fsdp.units`` entry (schema-validated) -> :class:`UnitSpec`."""
    if isinstance(value, str):
        return UnitSpec((value,), grouped=False)
    if isinstance(value, list):
        return UnitSpec(tuple(value), grouped=True)
    modules = value["modules"]
    given = tuple((k, freeze(v)) for k, v in value.items() if k != "modules")
    if isinstance(modules, str):
        return UnitSpec((modules,), grouped=False, given=given)
    return UnitSpec(tuple(modules), grouped=True, given=given)


def freeze(value: Any) -> Any:
    """Mappings and lists as nested tuples (a frozen dataclass's field stays immutable)."""
    if isinstance(value, Mapping):
        return tuple((k, freeze(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def _option(name: str, value: Any) -> Any:
    """A written option value (YAML form, possibly frozen to tuples) -> its UnitOptions form."""
    return convert_key(UnitOptions, name, value)


def _layer_index(path: str, layer_prefix: str) -> int | None:
    m = re.fullmatch(re.escape(layer_prefix) + r"\.(\d+)", path)
    return int(m[1]) if m else None


def resolve_units(
    specs: Sequence[UnitSpec] | None,
    defaults: Mapping[str, Any],
    root_reshard_after_forward: bool | int | None,
    module_paths: Sequence[str],
    layer_prefix: str,
) -> tuple[list[UnitPlan], list[tuple[str, str]]]:
    """The units in ``fully_shard`` order, and the problems found as (key path, message) pairs
    (a pattern matching no module, a module in two units, ``root`` not last).

    ``specs``: ``setup.fsdp.units`` (None: one unit per decoder layer, then the root);
    ``defaults``: the ``fsdp`` mapping's option values; ``module_paths``: every module FQN,
    ``named_modules()`` order (``""`` first).
    """
    written = specs is not None
    specs = list(specs) if written else [UnitSpec((f"{layer_prefix}.*",))]
    problems: list[tuple[str, str]] = []
    plans: list[UnitPlan] = []
    owner: dict[str, int] = {}  # module path -> entry index that took it
    base = {k: _option(k, v) for k, v in defaults.items()}
    root_spec: UnitSpec | None = None
    for i, spec in enumerate(specs):
        where = f"setup.fsdp.units[{i}]"
        if spec.is_root:
            if i != len(specs) - 1:
                problems.append(
                    (
                        f"{where}.modules",
                        f"'root' must be the last unit (the root's fully_shard is the last "
                        f"call, after its children); it is entry {i} of {len(specs)}",
                    )
                )
            root_spec = spec
            continue
        given = dict(spec.given)
        options = UnitOptions(**{**base, **{k: _option(k, v) for k, v in given.items()}})
        problems += _checkpoint_problems(options, given, where) + _alias_problems(options, given, where)
        if options.forward_methods:
            problems.append(
                (
                    f"{where}.forward_methods" if "forward_methods" in given else "setup.fsdp.forward_methods",
                    "only the root unit's module has a method to register (last_hidden_state); expected it "
                    "on the 'root' entry",
                )
            )
        found: list[str] = []
        for j, pattern in enumerate(spec.modules):
            key = f"{where}.modules" + (f"[{j}]" if spec.grouped else "")
            if pattern in ("", "root"):
                problems.append((key, "the root is not grouped with other modules; write 'root' as the last entry"))
                continue
            hits = match_modules(pattern, module_paths)
            if not hits:
                problems.append((key, f"{pattern!r} matches no module of the model; {_near(pattern, module_paths)}"))
            for hit in hits:
                if hit in owner:
                    problems.append(
                        (key, f"module {hit!r} is already in units[{owner[hit]}]; a module belongs to one unit")
                    )
                elif hit not in found:
                    found.append(hit)
        for hit in found:
            owner[hit] = i
        order = {p: n for n, p in enumerate(module_paths)}
        found.sort(key=order.__getitem__)
        groups = [found] if spec.grouped else [[p] for p in found]
        for paths in groups:
            if not paths:
                continue
            layer = _layer_index(paths[0], layer_prefix) if len(paths) == 1 else None
            plans.append(
                UnitPlan(
                    tuple(paths),
                    unit_label(paths),
                    "layer" if layer is not None else "module",
                    layer,
                    options,
                    i if written else None,
                )
            )
    root_given = dict(root_spec.given) if root_spec is not None else {}
    root_options = {
        **base,
        "reshard_after_forward": root_reshard_after_forward,
        **{k: _option(k, v) for k, v in root_given.items()},
    }
    root_where = f"setup.fsdp.units[{len(specs) - 1}]" if root_spec is not None else "setup.fsdp"
    problems += _checkpoint_problems(UnitOptions(**root_options), root_given, root_where)
    problems += _alias_problems(UnitOptions(**root_options), root_given, root_where)
    plans.append(
        UnitPlan(
            ("",), "", "root", None, UnitOptions(**root_options), len(specs) - 1 if root_spec is not None else None
        )
    )
    problems += _unused_checkpoint_defaults(defaults, plans)
    return plans, _distinct(problems)


def _distinct(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``problems`` without repeats (an fsdp-level option is resolved once per unit)."""
    return list(dict.fromkeys(problems))


def _alias_problems(options: UnitOptions, given: Mapping[str, Any], where: str) -> list[tuple[str, str]]:
    """Both divide-factor keys on one unit: torch keeps whichever setter ran last, so one is refused."""
    if options.gradient_divide_factor is None or options.reduce_scatter_divide_factor is None:
        return []
    name = "reduce_scatter_divide_factor"
    return [
        (
            f"{where}.{name}" if name in given else f"setup.fsdp.{name}",
            "is torch's deprecated alias of set_gradient_divide_factor, which this unit sets too; expected one "
            "of gradient_divide_factor or reduce_scatter_divide_factor",
        )
    ]


def _checkpoint_problems(options: UnitOptions, given: Mapping[str, Any], where: str) -> list[tuple[str, str]]:
    """A unit entry that names a checkpoint form without ``checkpoint: true``, or ``use_reentrant``
    for the composable form (``torch.distributed._composable.checkpoint`` raises NotImplementedError
    for it, torch 2.13)."""
    out = []
    if not options.checkpoint:
        for name in ("checkpoint_style", "checkpoint_use_reentrant"):
            if name in given:
                out.append((f"{where}.{name}", _NEEDS_CHECKPOINT))
    elif options.checkpoint_use_reentrant and options.checkpoint_style == "composable":
        name = "checkpoint_use_reentrant"
        out.append(
            (
                f"{where}.{name}" if name in given else f"setup.fsdp.{name}",
                "torch.distributed._composable.checkpoint has no reentrant form; expected checkpoint_style call "
                "or forward (torch.utils.checkpoint.checkpoint) beside it",
            )
        )
    return out


_NEEDS_CHECKPOINT = "applies to a checkpointed unit; expected checkpoint: true beside it (or at fsdp level)"


def _unused_checkpoint_defaults(defaults: Mapping[str, Any], plans: Sequence[UnitPlan]) -> list[tuple[str, str]]:
    """fsdp-level checkpoint forms when no unit is checkpointed."""
    if any(p.options.checkpoint for p in plans):
        return []
    return [
        (f"setup.fsdp.{n}", _NEEDS_CHECKPOINT)
        for n in ("checkpoint_style", "checkpoint_use_reentrant")
        if n in defaults
    ]


def _near(pattern: str, module_paths: Sequence[str]) -> str:
    """The closest module paths first (a spelling slip, a prefix too many), then those at the
    pattern's depth that share its first component (at most 8 shown)."""
    depth = pattern.count(".")
    head = pattern.split(".")[0]
    same = [p for p in module_paths if p and p.count(".") == depth and p.split(".")[0] == head]
    pool = same or [p for p in module_paths if p and p.count(".") == depth] or [p for p in module_paths if p]
    near = closest(pattern, module_paths)
    pool = near + [p for p in pool if p not in near]
    shown = pool[:8]
    return f"{did_you_mean(pattern, module_paths)}modules like it: {shown}" + (
        f" (and {len(pool) - 8} more)" if len(pool) > 8 else ""
    )
