"""``draft``: write a spec for a config and world size from the closed-form calculator, to stdout or
-o PATH. Exit 0 written; 1 a bad config file, output path or world size, or a spec the pre-flight
check would refuse (unless --no-preflight)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from harness.cli.console import print_mark, stderr_console
from harness.cli.signals import signals_held
from harness.contract.names import BACKENDS
from harness.report.output import file_problem, write_atomically

__all__ = ["add_arguments", "argument_problem", "command"]


def add_arguments(sub: argparse._SubParsersAction) -> None:
    draft = sub.add_parser("draft", help="draft a spec for a config from the closed-form calculator")
    draft.add_argument(
        "--config",
        required=True,
        help="a known config name (e.g. Qwen3-14B), its hub id (Qwen/Qwen3-14B), or a transformers "
        "config.json (nothing is downloaded)",
    )
    draft.add_argument("--world-size", type=int, required=True)
    draft.add_argument("--layers", type=int, default=2, help="decoder layers to run (default 2)")
    draft.add_argument(
        "--dtype",
        default=None,
        choices=("float16", "bfloat16", "float32"),
        help="parameter dtype (default: the config file's torch_dtype or dtype, else bfloat16)",
    )
    draft.add_argument(
        "--param-dtype",
        default=None,
        choices=("float16", "bfloat16", "float32"),
        help="MixedPrecisionPolicy param_dtype for every unit: the all-gather and compute dtype (default: none)",
    )
    draft.add_argument(
        "--reduce-dtype",
        default=None,
        choices=("float16", "bfloat16", "float32"),
        help="MixedPrecisionPolicy reduce_dtype for every unit: the gradient reduce-scatter dtype (default: none)",
    )
    draft.add_argument(
        "--reshard-after-forward",
        metavar="UNIT=VALUE",
        action="append",
        type=_unit_reshard,
        default=[],
        help="one unit's reshard_after_forward (true, false or a group size), e.g. layers.1=false; "
        "repeatable; units left out reshard (true)",
    )
    draft.add_argument(
        "--tp",
        type=int,
        default=1,
        help="tensor-parallel size: a [world-size / tp, tp] (dp, tp) mesh with torchtitan's Qwen3 TP plan "
        "(default 1: FSDP alone on a 1-D mesh)",
    )
    draft.add_argument(
        "--sequence-parallel",
        action="store_true",
        help="with --tp: torchtitan's sequence parallelism (each rank's 1/tp of the sequence between projections)",
    )
    draft.add_argument("--batch-per-rank", type=int, default=None, help="B (default: a spec's default)")
    draft.add_argument("--seq-len", type=int, default=None, help="L (default: a spec's default)")
    draft.add_argument("--backend", choices=BACKENDS, default=None)
    draft.add_argument("-o", "--output", help="write the spec here instead of stdout")
    draft.add_argument(
        "--no-preflight",
        action="store_true",
        help="write the spec even if this machine's pre-flight check would refuse to run it",
    )


def _unit_reshard(text: str) -> tuple[str, bool | int]:
    """``layers.1=false`` -> ("layers.1", False); argparse reports the ValueError's text."""
    unit, sep, value = text.partition("=")
    word = value.strip().lower()
    if not sep or not unit.strip():
        raise argparse.ArgumentTypeError(f"expected UNIT=VALUE (e.g. layers.1=false), got {text!r}")
    if word in ("true", "false"):
        return unit.strip(), word == "true"
    if word.isdigit() and int(word) >= 1:
        return unit.strip(), int(word)
    raise argparse.ArgumentTypeError(f"{text!r}: expected true, false or a group size >= 1 after '='")


def argument_problem(args: argparse.Namespace) -> str | None:
    """What argparse cannot check (a count below 1), as its error text; None when all are fine."""
    for name in ("world_size", "layers", "batch_per_rank", "seq_len", "tp"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}"
    units = [unit for unit, _ in args.reshard_after_forward]
    twice = sorted({u for u in units if units.count(u) > 1})
    if twice:
        return f"--reshard-after-forward: {', '.join(twice)} given more than once"
    return None


def _config_problem(config: str) -> str | None:
    """Why ``--config`` names no known config nor readable YAML/JSON mapping (bounded as specs); else None."""
    from model import KNOWN_CONFIGS

    if config in KNOWN_CONFIGS:
        return None
    path = Path(config)
    if not path.exists():
        return None  # draft says it is neither a known config nor a file
    from harness.load.yaml_safe import YamlFileError, load_text, read_text

    try:
        text = read_text(path)
        if path.suffix == ".json":
            try:
                data = json.loads(text)
            except (ValueError, RecursionError) as exc:
                return f"{path}: not valid JSON: {exc}"
        else:
            _, data = load_text(text, path)
    except YamlFileError as exc:
        return str(exc).replace("a spec may be", "a config file may be")
    if not isinstance(data, dict):
        return (
            f"{path}: expected a mapping of Qwen3Config fields (hidden_size, num_attention_heads, ...), "
            f"got {type(data).__name__}"
        )
    return None


def _yaml_load(text: str) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(text)


def command(args: argparse.Namespace, console: Console) -> int:
    with signals_held():  # the imports (a Ctrl-C meanwhile is raised after them; see run.py)
        from harness.author.draft import DraftError
        from harness.load.setup import SetupError

    err = stderr_console()
    problem = _input_problem(args)
    if problem:
        print_mark(err, False, problem)
        return 1
    try:
        text = _drafted_for_this_machine(args, err)
    except DraftError as exc:  # already names --config and what was expected
        print_mark(err, False, " ".join(str(exc).split()))
        return 1
    except (ValueError, TypeError, KeyError, SetupError) as exc:
        print_mark(err, False, f"--config {args.config}: {' '.join(str(exc).split())}")
        return 1
    if text is None:
        return 1
    if args.output:
        try:
            write_atomically(args.output, text)
        except OSError as exc:
            print_mark(err, False, f"-o {args.output}: cannot write: {exc.strerror or exc}")
            return 1
        console.print(f"wrote {args.output}", highlight=False)
    else:
        sys.stdout.write(text)
    return 0


def _input_problem(args: argparse.Namespace) -> str | None:
    """Why the output path, world size, layer count or config cannot make a spec; None when they can."""
    from harness.load.spec import MAX_LAYERS
    from harness.run.preflight import process_limit

    if args.output:
        problem = file_problem(args.output)
        if problem:
            return f"-o {args.output}: {problem}"
    # a spec of more layers would not load: said before the world's estimate, which it would swell
    if args.layers > MAX_LAYERS:
        return f"--layers {args.layers:,}: over the {MAX_LAYERS:,} decoder layers a spec may build"
    # the calculator's tables grow with the world as a simulation does: refused before drafting
    # where run would refuse to simulate the drafted spec (the same estimate); a real-backend draft
    # tabulates every rank, and its pre-flight check would refuse more ranks than processes anyway
    too_big = _simulation_problem(args)
    if args.backend in ("gloo", "nccl"):
        if args.world_size > process_limit() and not args.no_preflight:
            return (
                f"--world-size {args.world_size:,}: would start {args.world_size:,} processes on this machine, "
                f"over its limit of {process_limit()}; "
                + (f"simulated, {too_big}" if too_big else "use --backend fake to draft it for simulated ranks")
            )
    elif too_big is not None:
        return f"--world-size {args.world_size:,}: {too_big}"
    return _config_problem(args.config)


def _simulation_problem(args: argparse.Namespace) -> str | None:
    """Why ``run`` would refuse to simulate the draft (its estimate against the default timeout and this
    machine's memory); None otherwise."""
    from harness.run.preflight import PreflightError, refuse_simulation, simulated_run_estimate
    from model.config import get_config, known_config_name, read_config_file

    try:
        name = known_config_name(args.config)
        config = get_config(name if name is not None else read_config_file(args.config).config)
        est = simulated_run_estimate(
            get_config(config, num_hidden_layers=args.layers),
            world_size=args.world_size,
            shard_size=args.world_size,
            body="decoder_layers",  # the draft's setup
            dtype=args.dtype or "bfloat16",
            observed=min(args.world_size, 2),  # the draft's observe_ranks: [0, W-1]
        )
        refuse_simulation(est)
    except PreflightError as exc:
        return exc.reason
    except (ValueError, TypeError, KeyError, OSError):
        return None
    return None


def _drafted_for_this_machine(args: argparse.Namespace, err: Console) -> str | None:
    """The draft's YAML, for the fake backend (with a note) when this machine would refuse an ``auto``
    draft's real ranks; None when that too is refused (said on ``err``). Raises DraftError,
    SetupError, ValueError, TypeError, KeyError for a config that cannot be drafted."""
    from harness.author.draft import draft_spec
    from harness.load.setup import RunSetup
    from harness.run.preflight import PreflightError, check

    def draft(backend: str) -> str:
        return draft_spec(
            args.config,
            args.world_size,
            layers=args.layers,
            dtype=args.dtype,
            param_dtype=args.param_dtype,
            reduce_dtype=args.reduce_dtype,
            reshard_after_forward=dict(args.reshard_after_forward),
            **{k: getattr(args, k) for k in ("batch_per_rank", "seq_len") if getattr(args, k) is not None},
            backend=backend,
            output=args.output,
            tp=args.tp,
            sequence_parallel=args.sequence_parallel,
        )

    backend = args.backend or "auto"
    text = draft(backend)
    data = _yaml_load(text)
    try:  # would the pre-flight check run the drafted spec here?
        if not args.no_preflight:
            check(RunSetup.from_mapping(data["setup"]), data.get("backend", "auto"))
        return text
    except PreflightError as exc:
        refused = exc
    if data.get("backend", "auto") == "fake" or backend != "auto":
        print_mark(
            err,
            False,
            f"draft: the spec would be refused on this machine: {refused.reason}; "
            "use --no-preflight to write it anyway",
        )
        return None
    text = draft("fake")
    try:
        check(RunSetup.from_mapping(_yaml_load(text)["setup"]), "fake")
    except PreflightError as fake_exc:
        print_mark(
            err,
            False,
            f"draft: the spec would be refused on this machine: {refused.reason}; "
            f"simulated: {fake_exc.reason}; use --no-preflight to write it anyway",
        )
        return None
    err.print(
        Text(
            f"note: drafted for the fake backend (simulated ranks): on real ranks this machine "
            f"would refuse it: {refused.reason}"
        )
    )
    return text
