"""The bad-input corpus: every way a user can hand the command line a bad spec, file, flag or path
(issue 11), as cases of one shape, and what a clean answer to each is.

tests/cli/test_bad_inputs.py runs every case that starts no rank in-process through
``harness.cli.main``; scripts/try_bad_inputs.py runs all of them as subprocesses, as a user would,
and adds what only a real process shows (lingering processes, temp folders, the wall-clock bound).
A clean answer: the exit status docs/command-line.md gives, one output line naming what ``says``
names, no ``Traceback``, and short error output (at most ``max_lines`` lines, none over 500
characters).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tests.support.specs import TINY, TINY_FAKE


def bomb(levels: int, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def map_bomb(levels: int) -> str:
    lines = ["spec: x", "b0: &b0 {k: v}"]
    for i in range(1, levels + 1):
        lines.append(f"b{i}: &b{i} {{" + ", ".join(f"k{j}: *b{i - 1}" for j in range(9)) + "}")
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int) -> str:
    lines = ["m0: &m0 {k: [x, x, x, x, x, x, x, x, x]}"]
    for i in range(1, levels + 1):
        lines.append(f"m{i}: &m{i} {{<<: *m{i - 1}, " + ", ".join(f"k{j}: *m{i - 1}" for j in range(9)) + "}")
    return "\n".join(lines) + "\n"


def with_entry(entry: str) -> str:
    return TINY.replace("      - {id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}\n", f"      - {entry}\n")


def with_setup(old: str, new: str, base: str = TINY) -> str:
    assert old in base, old
    return base.replace(old, new)


@dataclass
class Case:
    name: str
    kind: str  # the issue's kind (1-8) or "cli"
    argv: list[str]  # after `python -m harness`; "{dir}" is the case's folder, "{spec}" its spec file
    rc: int | tuple[int, ...]
    says: tuple[str, ...] = ()  # all on one output line
    files: dict[str, str | bytes] = field(default_factory=dict)  # name -> content in the case folder
    bound_s: float = 60
    max_lines: int = 0  # error output lines allowed (nonzero rc); 0: 3, or 6 for argparse (its usage wraps)
    prepare: Callable[[Path], None] | None = None
    after: Callable[[Path, subprocess.CompletedProcess], str | None] | None = None  # extra check: a problem or None
    launches: bool = False  # starts ranks (real or simulated): run by the script only


def materialize(case: Case, folder: Path) -> list[str]:
    """Write ``case``'s files into ``folder`` (which exists), prepare it; the argv after ``python -m harness``."""
    for name, content in case.files.items():
        (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    if case.prepare:
        case.prepare(folder)
    return [a.replace("{dir}", str(folder)).replace("{spec}", str(folder / "spec.yaml")) for a in case.argv]


def output_problems(case: Case, done: subprocess.CompletedProcess, folder: Path) -> list[str]:
    """What is not clean in ``done``, the finished command of ``case`` run in ``folder``; [] if clean."""
    problems = []
    wanted = case.rc if isinstance(case.rc, tuple) else (case.rc,)
    if done.returncode not in wanted:
        problems.append(f"exit {done.returncode}, docs/command-line.md says {case.rc}")
    text = done.stdout + done.stderr
    if "Traceback" in text:
        problems.append("a Traceback")
    if case.says and not any(all(s in line for s in case.says) for line in text.splitlines()):
        problems.append(f"no line says {case.says}")
    if done.returncode != 0 and case.rc != 0:
        lines = [line for line in text.splitlines() if line.strip()]
        most = case.max_lines or (6 if case.kind == "cli" else 3)
        if len(lines) > most:
            problems.append(f"{len(lines)} lines of output (at most {most})")
        if any(len(line) > 500 for line in lines):
            problems.append("a line over 500 characters")
    if case.after:
        extra = case.after(folder, done)
        if extra:
            problems.append(extra)
    return problems


# --- the bad inputs ------------------------------------------------------------------------------


def _exists(name: str) -> Callable[[Path, subprocess.CompletedProcess], str | None]:
    def check(folder: Path, proc: subprocess.CompletedProcess) -> str | None:
        return None if (folder / name).exists() else f"{name} was not written"

    return check


def _absent(name: str) -> Callable[[Path, subprocess.CompletedProcess], str | None]:
    def check(folder: Path, proc: subprocess.CompletedProcess) -> str | None:
        return f"{name} was written" if (folder / name).exists() else None

    return check


def _results_kept(folder: Path, proc: subprocess.CompletedProcess) -> str | None:
    kept = list((folder / "tmp").glob("fsdp2-results-*.json"))
    if not kept:
        return "the results were not kept anywhere"
    try:
        payload = json.loads(kept[0].read_text())
    except ValueError:
        return "the kept results are not JSON"
    return None if payload.get("results") else "the kept results are empty"


def _mkfile(name: str, text: str = "x") -> Callable[[Path], None]:
    def prepare(folder: Path) -> None:
        (folder / name).write_text(text)

    return prepare


def _mkfifo(folder: Path) -> None:
    os.mkfifo(folder / "spec.yaml")


def _mkdir_spec(folder: Path) -> None:
    (folder / "spec.yaml").mkdir()


def inputs() -> list[Case]:
    S = "{spec}"

    def v(name, kind, text, says, **kw):  # a bad spec given to validate (status 1 unless said)
        return Case(name, kind, ["validate", S], kw.pop("rc", 1), says, {"spec.yaml": text}, **kw)

    def r(name, kind, text, says, **kw):  # a bad spec given to run (status 2 unless said)
        return Case(name, kind, ["run", S, *kw.pop("extra", [])], kw.pop("rc", 2), says, {"spec.yaml": text}, **kw)

    cases = [
        # 1. loading never ends: aliases, recursion, depth, size, odd files
        v("alias_bomb_9", "1", bomb(9), ("spec.yaml", "aliases expand")),
        r("alias_bomb_9_run", "1", bomb(9), ("spec.yaml", "aliases expand")),
        v("alias_bomb_5", "1", bomb(5), ("spec.yaml", "aliases expand"), max_lines=1),
        v("alias_bomb_mapping", "1", map_bomb(8), ("spec.yaml", "aliases expand")),
        v("alias_bomb_merge_keys", "1", merge_bomb(8), ("spec.yaml",)),
        v("alias_recursive", "1", "spec: &a [1, *a]\n", ("spec.yaml:1", "recursive alias")),
        v("alias_undefined", "1", "spec: x\ntitle: *nope\n", ("spec.yaml:2", "nope")),
        v("deep_nesting_lists", "1", "spec: " + "[" * 200_000 + "]" * 200_000 + "\n", ("spec.yaml", "nested deeper")),
        v("deep_nesting_maps", "1", "spec: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", ("spec.yaml", "nested deeper")),
        v(
            "deep_nesting_block",
            "1",
            "".join("  " * i + f"k{i}:\n" for i in range(600)) + "  " * 600 + "v\n",
            ("spec.yaml", "nested deeper"),
        ),
        v("huge_file_50MB", "1", "# " + "x" * 50_000_000 + "\n", ("spec.yaml", "at most")),
        v(
            "huge_line_in_bounds",
            "1",
            TINY.replace("title: a tiny spec", "title: [" + ", ".join(["1"] * 150_000) + "]"),
            ("spec.yaml",),
        ),
        Case("dev_zero", "1", ["validate", "/dev/zero"], 1, ("/dev/zero", "not a regular file")),
        Case("fifo", "1", ["validate", S], 1, ("spec.yaml", "not a regular file"), prepare=_mkfifo),
        Case("folder_as_spec", "1", ["validate", S], 1, ("spec.yaml", "folder"), prepare=_mkdir_spec),
        Case("missing_spec", "1", ["validate", "{dir}/nope.yaml"], 1, ("nope.yaml", "No such file")),
        Case("missing_spec_run", "1", ["run", "{dir}/nope.yaml"], 2, ("nope.yaml", "No such file")),
        v("empty_file", "1", "", ("spec.yaml",)),
        v("two_documents", "1", TINY + "---\n" + TINY, ("spec.yaml", "single document")),
        v("python_tag", "1", "spec: !!python/object/apply:os.system [echo hi]\n", ("spec.yaml",)),
        v("top_level_list", "1", "- 1\n- 2\n", ("spec.yaml",)),
        # 2. bytes that are not UTF-8
        v("byte_ff", "2", b"spec: x\ntitle: \xff\n", ("spec.yaml:2", "not UTF-8 text (byte 0xff at offset 15)")),
        r("byte_ff_run", "2", b"spec: x\ntitle: \xff\n", ("spec.yaml:2", "not UTF-8 text (byte 0xff at offset 15)")),
        v(
            "latin1_e_acute",
            "2",
            TINY.replace("a tiny spec", "caf\u00e9").encode("latin-1"),
            ("spec.yaml", "byte 0xe9"),
        ),
        v("utf16_bom", "2", TINY.encode("utf-16"), ("spec.yaml", "not UTF-8")),
        v("truncated_utf8", "2", b"spec: x\ntitle: \xc3(\n", ("spec.yaml", "byte 0xc3")),
        v("nul_byte", "2", b"spec: x\x00\n", ("spec.yaml", "U+0000")),
        v("utf8_bom_is_valid", "2", b"\xef\xbb\xbf" + TINY.encode(), ("spec.yaml", "entries"), rc=0),
        Case(
            "latin1_draft_config",
            "2",
            ["draft", "--config", "{dir}/c.yaml", "--world-size", "4"],
            1,
            ("c.yaml", "byte 0xe9"),
            {"c.yaml": "hidden_size: 64\nname: caf\u00e9\n".encode("latin-1")},
        ),
        # 3. impossible resources
        r(
            "mesh_100000_gloo",
            "3",
            with_setup("shape: [4]", "shape: [100000]").replace("tables:", "backend: gloo\ntables:"),
            ("spec.yaml", "100,000 processes", "--backend fake"),
        ),
        r(
            "hidden_size_1e8",
            "3",
            with_setup("{num_hidden_layers: 2}", "{num_hidden_layers: 2, hidden_size: 100000000}"),
            ("spec.yaml: needs ~", "GB per rank × 4 ranks", "use --backend fake to simulate it, or --no-preflight"),
            extra=["--backend", "gloo"],
        ),
        r(
            "intermediate_1e12",
            "3",
            with_setup("{num_hidden_layers: 2}", "{num_hidden_layers: 2, intermediate_size: 1000000000000}"),
            ("spec.yaml", "needs ~"),
            extra=["--backend", "gloo"],
        ),
        r(
            "layers_1000_gloo",
            "3",
            with_setup(
                "{num_hidden_layers: 2}", "{num_hidden_layers: 1000, hidden_size: 8192, intermediate_size: 65536}"
            ),
            ("spec.yaml", "needs ~"),
            extra=["--backend", "gloo"],
        ),
        r(
            "batch_1e9",
            "3",
            with_setup("  mesh:", "  batch_per_rank: 1000000000\n  seq_len: 1000000\n  mesh:"),
            ("spec.yaml",),
            extra=["--backend", "gloo"],
        ),
        r(
            "hidden_size_1e30",
            "3",
            with_setup(
                "{num_hidden_layers: 2}", "{num_hidden_layers: 2, hidden_size: 1000000000000000000000000000000}"
            ),
            ("spec.yaml",),
        ),
        # no fixed cap on a simulated world: 100,000 ranks run; 10^8 are refused by the run's own estimate
        r(
            "mesh_1e8_fake",
            "3",
            with_setup("shape: [4]", "shape: [100000000]", TINY_FAKE),
            ("spec.yaml", "would take ~", "over the run's timeout"),
        ),
        r(
            "hidden_size_1e8_fake_simulated",
            "3",
            with_setup("{num_hidden_layers: 2}", "{num_hidden_layers: 2, hidden_size: 100000000}", TINY_FAKE),
            ("x_norm", "✗"),
            rc=1,
            bound_s=90,
            launches=True,
            max_lines=40,
        ),
        r(
            "layers_1e6_gloo",
            "3",
            with_setup("{num_hidden_layers: 2}", "{num_hidden_layers: 1000000}"),
            ("spec.yaml:5", "num_hidden_layers"),
            extra=["--backend", "gloo"],
        ),
        Case(
            "draft_trillion_ranks",
            "3",
            ["draft", "--config", "Qwen3-8B", "--world-size", "1000000000000"],
            1,
            ("--world-size", "simulating a world of 1,000,000,000,000 ranks would take ~"),
        ),
        Case(
            "draft_100000_gloo",
            "3",
            ["draft", "--config", "walkthrough", "--world-size", "100000", "--backend", "gloo"],
            1,
            ("would start 100,000 processes",),
        ),
        Case(
            "draft_layers_1e9",
            "3",
            ["draft", "--config", "Qwen3-8B", "--world-size", "4", "--layers", "1000000000"],
            1,
            ("--layers 1,000,000,000: over the 1,024 decoder layers",),
        ),
        Case(
            "draft_seq_len_1e12",
            "3",
            ["draft", "--config", "Qwen3-8B", "--world-size", "4", "--seq-len", "1000000000000", "--backend", "gloo"],
            1,
            ("refused",),
        ),
        # 4. expectations that can never hold: load errors naming file:line: key path
        v(
            "shape_word",
            "4",
            with_entry("{id: x_norm, step: step1.x_norm, shape: [2, eight, 512]}"),
            ("spec.yaml:12", "shape"),
        ),
        r(
            "shape_word_run",
            "4",
            with_entry("{id: x_norm, step: step1.x_norm, shape: [2, eight, 512]}"),
            ("spec.yaml:12", "shape"),
        ),
        v(
            "dtype_float17",
            "4",
            with_entry("{id: x_norm, step: step1.x_norm, dtype: float17}"),
            ("spec.yaml:12", "float17"),
        ),
        r(
            "dtype_float17_run",
            "4",
            with_entry("{id: x_norm, step: step1.x_norm, dtype: float17}"),
            ("spec.yaml:12", "float17"),
        ),
        v(
            "shape_negative",
            "4",
            with_entry("{id: x_norm, step: step1.x_norm, shape: [2, -8, 512]}"),
            ("spec.yaml:12", "shape"),
        ),
        v("shape_string", "4", with_entry("{id: x_norm, step: step1.x_norm, shape: big}"), ("spec.yaml:12", "shape")),
        v(
            "shape_float",
            "4",
            with_entry("{id: x_norm, step: step1.x_norm, shape: [2.5, 8]}"),
            ("spec.yaml:12", "shape"),
        ),
        v(
            "entry_unknown_key",
            "4",
            with_entry("{id: x_norm, step: step1.x_norm, shap: [2, 8, 512]}"),
            ("spec.yaml:12", "shap"),
        ),
        v(
            "step_unknown",
            "4",
            with_entry("{id: x_norm, step: step99.nope, shape: [2, 8, 512]}"),
            ("spec.yaml:12", "step99.nope"),
        ),
        v(
            "ranks_out_of_world",
            "4",
            with_entry("{id: x_norm, step: step1.x_norm, ranks: [7], shape: [2, 8, 512]}"),
            ("spec.yaml:12", "7"),
        ),
        v(
            "input_rank_out_of_world",
            "4",
            TINY.replace("check: step", "check: input").replace(
                "{id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}", "{id: i, rank: 9, shape: [2, 8]}"
            ),
            ("spec.yaml:12", "9"),
        ),
        v(
            "layers_over_bound",
            "4",
            with_setup("{num_hidden_layers: 2}", "{num_hidden_layers: 1000000}"),
            ("spec.yaml:5", "num_hidden_layers", "1,024"),
        ),
        v(
            "layer_out_of_model",
            "4",
            TINY.replace("    check: step\n", "    check: step\n    with: {layer: 99}\n"),
            ("spec.yaml", "99"),
        ),
        v(
            "param_unknown",
            "4",
            TINY.replace("check: step", "check: param").replace(
                "{id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}",
                "{id: p, param: self_attn.zz_proj.weight, local_numel: 1}",
            ),
            ("spec.yaml:12", "zz_proj"),
        ),
        v("check_kind_unknown", "4", TINY.replace("check: step", "check: nope"), ("spec.yaml:10", "nope")),
        v("top_level_unknown_key", "4", TINY + "colour: blue\n", ("spec.yaml", "colour")),
        v("mesh_shape_word", "4", with_setup("shape: [4]", "shape: four"), ("spec.yaml:6", "shape")),
        v("mesh_zero", "4", with_setup("shape: [4]", "shape: [0]"), ("spec.yaml:6", "shape")),
        v(
            "mesh_names_mismatch",
            "4",
            with_setup("dim_names: [dp]", "dim_names: [dp, tp]"),
            ("spec.yaml:6", "dim_names"),
        ),
        v(
            "config_unknown",
            "4",
            with_setup("config: walkthrough", "config: Qwen3-999B"),
            ("spec.yaml:5", "Qwen3-999B"),
        ),
        v(
            "override_string",
            "4",
            with_setup("{num_hidden_layers: 2}", "{num_hidden_layers: two}"),
            ("spec.yaml:5", "num_hidden_layers"),
        ),
        v(
            "override_unknown",
            "4",
            with_setup("{num_hidden_layers: 2}", "{num_hidden_layers: 2, colour: 3}"),
            ("spec.yaml:5", "colour"),
        ),
        v(
            "override_heads_indivisible",
            "4",
            with_setup("{num_hidden_layers: 2}", "{num_hidden_layers: 2, num_attention_heads: 7}"),
            ("spec.yaml:5", "num_attention_heads"),
        ),
        v("tables_string", "4", TINY.split("tables:")[0] + "tables: lots\n", ("spec.yaml", "tables")),
        v("tables_missing", "4", TINY.split("tables:")[0], ("spec.yaml", "tables")),
        v(
            "unit_impossible",
            "4",
            with_setup("  mesh:", "  fsdp: {units: [model.layers.99]}\n  mesh:"),
            ("spec.yaml", "layers.99"),
        ),
        v(
            "memory_state_unknown",
            "4",
            TINY.replace("check: step", "check: memory\n    with: {layer: 0}").replace(
                "{id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}",
                "{id: m, state: After Nothing, sharded_param: 0}",
            ),
            ("spec.yaml:13", "After Nothing"),
        ),
        v("timeout_negative", "4", TINY.replace("tables:", "timeout_s: -5\ntables:"), ("spec.yaml", "timeout")),
        v("backend_unknown", "4", TINY.replace("tables:", "backend: mpi\ntables:"), ("spec.yaml", "mpi")),
        v(
            "collective_count_word",
            "4",
            TINY.replace("check: step", "check: collectives").replace(
                "{id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}", "{id: c, select: {op: all_gather}, count: many}"
            ),
            ("spec.yaml:12", "count"),
        ),
        v(
            "collective_op_unknown",
            "4",
            TINY.replace("check: step", "check: collectives").replace(
                "{id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}", "{id: c, select: {op: all_gossip}, count: 1}"
            ),
            ("spec.yaml:12", "all_gossip"),
        ),
        v(
            "duplicate_entry_id",
            "4",
            TINY.replace(
                "      - {id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}\n",
                "      - {id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}\n" * 2,
            ),
            ("spec.yaml", "x_norm"),
        ),
        v(
            "attention_kernel_unknown",
            "4",
            with_setup("{num_hidden_layers: 2}}", "{num_hidden_layers: 2}, attention_kernel: fast}"),
            ("spec.yaml:5", "setup.model.attention_kernel", "'math'", "got 'fast'"),
        ),
        v(
            "abort_backward_at_no_unit",
            "4",
            with_setup("  mesh:", "  schedule: {steps: [{abort_backward_at: layers.7}, {}]}\n  mesh:"),
            ("spec.yaml:6", "setup.schedule.steps[0].abort_backward_at", "no FSDP unit 'layers.7'"),
        ),
        v(
            "forward_input_unknown",
            "4",
            with_setup("  mesh:", "  schedule: {steps: [{forward_input: tuple}]}\n  mesh:"),
            ("spec.yaml:6", "setup.schedule.steps[0].forward_input", "'user_dict'", "got 'tuple'"),
        ),
        v(
            "forward_method_on_decoder_layers",
            "4",
            with_setup("  mesh:", "  schedule: {steps: [{forward_method: last_hidden_state}]}\n  mesh:"),
            ("spec.yaml", "setup.schedule.steps[0].forward_method", "the causal LM's method"),
        ),
        v(
            "forward_methods_on_a_layer_unit",
            "4",
            with_setup(
                "  mesh:", "  fsdp: {units: [{modules: layers.*, forward_methods: [last_hidden_state]}]}\n  mesh:"
            ),
            ("spec.yaml", "setup.fsdp.units[0].forward_methods", "only the root unit's module"),
        ),
        v(
            "forward_methods_on_a_root_without_the_method",
            "4",
            with_setup(
                "  mesh:", "  fsdp: {units: [layers.*, {modules: root, forward_methods: [last_hidden_state]}]}\n  mesh:"
            ),
            ("spec.yaml", "setup.fsdp.units[1].forward_methods", "decoder_layers's root has no last_hidden_state"),
        ),
        v(
            "forward_method_with_a_container_input",
            "4",
            with_setup(
                "{num_hidden_layers: 2}}",
                "{num_hidden_layers: 2}, body: causal_lm}\n  schedule: {loss: sum, steps: "
                "[{forward_method: last_hidden_state, forward_input: dict}]}",
            ),
            ("spec.yaml", "setup.schedule.steps[0].forward_input", "takes the tensor positionally"),
        ),
        v(
            "last_hidden_state_with_cross_entropy",
            "4",
            with_setup(
                "{num_hidden_layers: 2}}",
                "{num_hidden_layers: 2}, body: causal_lm}\n  schedule: {steps: [{forward_method: last_hidden_state}]}",
            ),
            ("spec.yaml", "setup.schedule.loss", "not logits"),
        ),
        v(
            "container_input_into_a_checkpointed_root",
            "4",
            with_setup(
                "  mesh:",
                "  fsdp: {units: [layers.*, {modules: root, checkpoint: true}]}\n"
                "  schedule: {steps: [{forward_input: dict}]}\n  mesh:",
            ),
            ("spec.yaml", "setup.schedule.steps[0].forward_input", "the root is checkpointed"),
        ),
        v(
            "memory_entry_under_input_grad_penalty",
            "4",
            with_setup("  mesh:", "  schedule: {loss: input_grad_penalty}\n  mesh:")
            .replace("check: step", "check: memory")
            .replace(
                "{id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}",
                "{id: m, layer: 0, state: After Pre-Forward, unsharded_param: 0}",
            ),
            ("spec.yaml", "tables[0].entries[0]", "FSDPMemTracker does not run here"),
        ),
        v(
            "memory_entry_with_the_tracker_off",
            "4",
            with_setup("  mesh:", "  track_memory: false\n  mesh:")
            .replace("check: step", "check: memory")
            .replace(
                "{id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}",
                "{id: m, layer: 0, state: After Pre-Forward, unsharded_param: 0}",
            ),
            ("spec.yaml", "tables[0].entries[0]", "setup.track_memory is false"),
        ),
        v(
            "tp_plan_names_no_module",
            "4",
            with_setup(
                "  mesh: {shape: [4], dim_names: [dp]}",
                "  mesh: {shape: [2, 2], dim_names: [dp, tp]}\n"
                "  tensor_parallel: {plan: {self_attn.qkv_proj: colwise}}",
            ),
            ("spec.yaml", "setup.tensor_parallel.plan", "'self_attn.qkv_proj' names no module"),
        ),
        v(
            "tp_on_a_1d_mesh",
            "4",
            with_setup("  mesh:", "  tensor_parallel: {}\n  mesh:"),
            ("spec.yaml", "setup.tensor_parallel.mesh_dim", "the last dim of a 2-D mesh"),
        ),
        v(
            "tp_size_not_dividing_the_kv_heads",
            "4",
            with_setup(
                "  mesh: {shape: [4], dim_names: [dp]}",
                "  mesh: {shape: [1, 3], dim_names: [dp, tp]}\n  tensor_parallel: {}",
            ),
            (
                "spec.yaml",
                "setup.tensor_parallel.mesh_dim",
                "TP size 3 does not divide the config's num_attention_heads",
            ),
        ),
        v(
            "tp_style_unknown",
            "4",
            with_setup(
                "  mesh: {shape: [4], dim_names: [dp]}",
                "  mesh: {shape: [2, 2], dim_names: [dp, tp]}\n  tensor_parallel: {plan: {self_attn.q_proj: diagonal}}",
            ),
            ("spec.yaml", "setup.tensor_parallel.plan.self_attn.q_proj", "'colwise'", "diagonal"),
        ),
        v(
            "tp_with_a_schedule",
            "4",
            with_setup(
                "  mesh: {shape: [4], dim_names: [dp]}",
                "  mesh: {shape: [2, 2], dim_names: [dp, tp]}\n  tensor_parallel: {}\n  schedule: {steps: [{}, {}]}",
            ),
            ("spec.yaml", "setup.tensor_parallel", "does not go with setup.schedule"),
        ),
        v(
            "ep_on_a_dense_model",
            "4",
            with_setup(
                "  mesh: {shape: [4], dim_names: [dp]}",
                "  mesh: {shape: [2, 2], dim_names: [efsdp, ep]}\n  expert_parallel: {}",
            ),
            ("spec.yaml", "setup.expert_parallel.mesh_dim", "needs a MoE config"),
        ),
        v(
            "ep_experts_not_a_unit_of_their_own",
            "4",
            with_setup(
                "  model: {config: walkthrough, overrides: {num_hidden_layers: 2}}\n"
                "  mesh: {shape: [4], dim_names: [dp]}",
                "  model: {config: moe-tiny}\n  mesh: {shape: [2, 2], dim_names: [efsdp, ep]}\n  expert_parallel: {}",
            ),
            ("spec.yaml", "setup.fsdp.units", "a unit of their own"),
        ),
        v(
            "ep_mesh_named_dp",
            "4",
            with_setup(
                "  mesh: {shape: [4], dim_names: [dp]}",
                "  mesh: {shape: [2, 2], dim_names: [dp, ep]}\n  expert_parallel: {}",
            ),
            ("spec.yaml", "setup.expert_parallel.mesh_dim", "'dp' names the whole world's mesh"),
        ),
        v(
            "ep_size_not_dividing_the_experts",
            "4",
            with_setup(
                "  model: {config: walkthrough, overrides: {num_hidden_layers: 2}}\n"
                "  mesh: {shape: [4], dim_names: [dp]}",
                "  model: {config: moe-tiny}\n  mesh: {shape: [1, 3], dim_names: [efsdp, ep]}\n"
                "  expert_parallel: {}\n  fsdp: {units: [layers.*.mlp.experts, layers.*]}",
            ),
            ("spec.yaml", "setup.expert_parallel.mesh_dim", "does not divide the config's num_experts 8"),
        ),
        v(
            "dp_mesh_dims_naming_no_mesh_dim",
            "4",
            with_setup("  mesh:", "  fsdp: {dp_mesh_dims: {shard: dp_shard}}\n  mesh:"),
            ("spec.yaml", "setup.fsdp.dp_mesh_dims", "every mesh dim named once", "got shard 'dp_shard'"),
        ),
        v(
            "dp_mesh_dims_with_tensor_parallel",
            "4",
            with_setup(
                "  mesh: {shape: [4], dim_names: [dp]}",
                "  mesh: {shape: [2, 2], dim_names: [dp, tp]}\n  tensor_parallel: {}\n"
                "  fsdp: {dp_mesh_dims: {shard: dp, replicate: tp}}",
            ),
            ("spec.yaml", "setup.fsdp.dp_mesh_dims", "does not go with setup.tensor_parallel"),
        ),
        v(
            "post_optim_event_without_an_optimizer_step",
            "4",
            with_setup("  mesh:", "  schedule: {steps: [{post_optim_event: true, optimizer_step: false}]}\n  mesh:"),
            ("spec.yaml", "setup.schedule.steps[0].post_optim_event", "follows the optimizer step"),
        ),
        v(
            "sequence_parallel_on_a_causal_lm",
            "4",
            with_setup(
                "  model: {config: walkthrough, overrides: {num_hidden_layers: 2}}\n"
                "  mesh: {shape: [4], dim_names: [dp]}",
                "  model: {config: walkthrough, overrides: {num_hidden_layers: 2}, body: causal_lm}\n"
                "  mesh: {shape: [2, 2], dim_names: [dp, tp]}\n  tensor_parallel: {sequence_parallel: true}",
            ),
            ("spec.yaml", "setup.tensor_parallel.sequence_parallel", "body decoder_layers only"),
        ),
        v(
            "sequence_parallel_seq_len_not_divided",
            "4",
            with_setup(
                "  mesh: {shape: [4], dim_names: [dp]}",
                "  mesh: {shape: [2, 2], dim_names: [dp, tp]}\n  seq_len: 7\n"
                "  tensor_parallel: {sequence_parallel: true}",
            ),
            ("spec.yaml", "setup.tensor_parallel.sequence_parallel", "does not divide seq_len 7"),
        ),
        v(
            "share_comm_ctx_naming_no_unit",
            "4",
            with_setup("  mesh:", "  fsdp: {share_comm_ctx: [layers.0, layers.9]}\n  mesh:"),
            ("spec.yaml", "setup.fsdp.share_comm_ctx[1]", "no FSDP unit named 'layers.9'"),
        ),
        v(
            "forward_methods_unknown_name",
            "4",
            with_setup("  mesh:", "  fsdp: {units: [layers.*, {modules: root, forward_methods: [generate]}]}\n  mesh:"),
            ("spec.yaml", "setup.fsdp.units[1].forward_methods[0]", "last_hidden_state", "got 'generate'"),
        ),
        v(
            "input_grad_penalty_on_a_causal_lm",
            "4",
            with_setup(
                "{num_hidden_layers: 2}}",
                "{num_hidden_layers: 2}, body: causal_lm}\n  schedule: {loss: input_grad_penalty}",
            ),
            ("spec.yaml", "setup.schedule.loss", "input_grad_penalty differentiates the hidden states"),
        ),
        v(
            "all_gather_extension_without_call",
            "4",
            TINY.replace("check: step", "check: all_gather_extension").replace(
                "{id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}", "{id: e, layer: 0, calls: 2}"
            ),
            ("spec.yaml", "tables[0].entries[0]", "names its 'call': pre or post"),
        ),
        v(
            "expect_error_signal_unknown",
            "4",
            TINY.replace("check: step", "check: expect_error").replace(
                "{id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}", "{id: d, died: true, signal: SIGFOO}"
            ),
            ("spec.yaml:12", "signal", "SIGFOO"),
        ),
        # 5. output paths
        Case(
            "json_missing_folder",
            "5",
            ["run", S, "--json", "{dir}/missing/out.json"],
            2,
            ("--json", "missing/out.json: the folder", "does not exist; create it first"),
            {"spec.yaml": TINY_FAKE},
        ),
        Case(
            "json_is_folder",
            "5",
            ["run", S, "--json", "{dir}"],
            2,
            ("--json", "is a folder; expected a file path"),
            {"spec.yaml": TINY_FAKE},
        ),
        Case(
            "json_parent_is_file",
            "5",
            ["run", S, "--json", "{dir}/afile/out.json"],
            2,
            ("--json",),
            {"spec.yaml": TINY_FAKE, "afile": "x"},
        ),
        Case(
            "json_unwritable_folder",
            "5",
            ["run", S, "--json", "/proc/1/out.json"],
            2,
            ("--json", "not writable"),
            {"spec.yaml": TINY_FAKE},
        ),
        Case(
            "json_write_fails_after_run",
            "5",
            ["run", S, "--json", "/dev/full"],
            2,
            ("--json", "results kept in"),
            {"spec.yaml": TINY_FAKE},
            after=_results_kept,
            max_lines=40,
            bound_s=120,
            launches=True,
        ),
        Case(
            "json_to_dev_stdout",
            "5",
            ["run", S, "--json", "/dev/stdout"],
            0,
            ('"results"',),
            {"spec.yaml": TINY_FAKE},
            bound_s=120,
            launches=True,
        ),
        Case(
            "report_missing_folder",
            "5",
            ["run", S, "--report", "{dir}/missing/r.md"],
            2,
            ("--report", "does not exist"),
            {"spec.yaml": TINY_FAKE},
        ),
        Case(
            "report_is_folder",
            "5",
            ["run", S, "--report", "{dir}"],
            2,
            ("--report", "folder"),
            {"spec.yaml": TINY_FAKE},
        ),
        Case(
            "junitxml_missing_folder",
            "5",
            ["run", S, "--junitxml", "{dir}/missing/j.xml"],
            2,
            ("--junitxml", "does not exist"),
            {"spec.yaml": TINY_FAKE},
        ),
        Case(
            "junitxml_parent_is_file",
            "5",
            ["run", S, "--junitxml", "{dir}/afile/j.xml"],
            2,
            ("--junitxml",),
            {"spec.yaml": TINY_FAKE, "afile": "x"},
        ),
        Case(
            "trace_is_a_file",
            "5",
            ["run", S, "--trace", "{dir}/afile"],
            2,
            ("--trace", "afile: is a file; expected a folder (it is made if missing)"),
            {"spec.yaml": TINY_FAKE, "afile": "x"},
        ),
        Case(
            "trace_parent_is_file",
            "5",
            ["run", S, "--trace", "{dir}/afile/t"],
            2,
            ("--trace", "afile/t: ", "afile' is a file, not a folder"),
            {"spec.yaml": TINY_FAKE, "afile": "x"},
        ),
        Case(
            "plot_is_a_file",
            "5",
            ["run", S, "--plot", "{dir}/afile"],
            2,
            ("--plot", "afile: is a file; expected a folder (it is made if missing)"),
            {"spec.yaml": TINY_FAKE, "afile": "x"},
        ),
        Case(
            "plot_parent_is_file",
            "5",
            ["run", S, "--plot", "{dir}/afile/p"],
            2,
            ("--plot", "afile"),
            {"spec.yaml": TINY_FAKE, "afile": "x"},
        ),
        Case(
            "render_trace_is_a_file",
            "5",
            ["render", S, "--trace", "{dir}/afile"],
            2,
            ("--trace", "afile: is a file; expected a folder (it is made if missing)"),
            {"spec.yaml": TINY_FAKE, "afile": "x"},
        ),
        Case(
            "plot_missing_folder_is_made",
            "5",
            ["run", S, "--plot", "{dir}/new/plots"],
            0,
            (),
            {"spec.yaml": TINY_FAKE},
            after=_exists("new/plots"),
            bound_s=120,
            launches=True,
        ),
        Case(
            "render_out_is_a_file",
            "5",
            ["render", S, "--out", "{dir}/afile"],
            2,
            ("--out", "afile: is a file; expected a folder (it is made if missing)"),
            {"spec.yaml": TINY_FAKE, "afile": "x"},
        ),
        Case(
            "render_from_json_missing",
            "5",
            ["render", S, "--from-json", "{dir}/nope.json"],
            2,
            ("nope.json",),
            {"spec.yaml": TINY_FAKE},
        ),
        Case(
            "render_from_json_binary",
            "5",
            ["render", S, "--from-json", "{dir}/obs.json"],
            2,
            ("obs.json",),
            {"spec.yaml": TINY_FAKE, "obs.json": bytes(range(256))},
        ),
        # 6. draft's input files and output
        Case(
            "draft_config_binary",
            "6",
            ["draft", "--config", "{dir}/c.bin", "--world-size", "4"],
            1,
            ("c.bin", "not UTF-8 text (byte 0x80 at offset 128)"),
            {"c.bin": bytes(range(256)) * 4},
            max_lines=1,
        ),
        Case(
            "draft_config_malformed",
            "6",
            ["draft", "--config", "{dir}/c.yaml", "--world-size", "4"],
            1,
            ("c.yaml", "expected ',' or ']'"),
            {"c.yaml": "hidden_size: [1, 2\n"},
            max_lines=1,
        ),
        Case(
            "draft_config_malformed_json",
            "6",
            ["draft", "--config", "{dir}/c.json", "--world-size", "4"],
            1,
            ("c.json", "not valid JSON: Expecting property name"),
            {"c.json": '{"hidden_size": 1,,}'},
            max_lines=1,
        ),
        Case(
            "draft_config_folder",
            "6",
            ["draft", "--config", "{dir}", "--world-size", "4"],
            1,
            ("is a folder; expected a YAML file",),
        ),
        Case(
            "draft_config_missing",
            "6",
            ["draft", "--config", "{dir}/nope.yaml", "--world-size", "4"],
            1,
            ("nope.yaml",),
        ),
        Case(
            "draft_config_empty",
            "6",
            ["draft", "--config", "{dir}/c.yaml", "--world-size", "4"],
            1,
            ("c.yaml",),
            {"c.yaml": ""},
        ),
        Case(
            "draft_config_zero_heads",
            "6",
            ["draft", "--config", "{dir}/c.yaml", "--world-size", "4"],
            1,
            ("c.yaml",),
            {"c.yaml": "hidden_size: 64\nnum_attention_heads: 0\n"},
        ),
        Case(
            "draft_config_string_field",
            "6",
            ["draft", "--config", "{dir}/c.json", "--world-size", "4"],
            1,
            ("c.json", "hidden_size"),
            {
                "c.json": json.dumps(
                    {
                        "hidden_size": "big",
                        "num_attention_heads": 4,
                        "num_key_value_heads": 2,
                        "head_dim": 16,
                        "intermediate_size": 128,
                        "vocab_size": 128,
                        "num_hidden_layers": 2,
                    }
                )
            },
        ),
        Case(
            "draft_config_list",
            "6",
            ["draft", "--config", "{dir}/c.yaml", "--world-size", "4"],
            1,
            ("c.yaml", "expected a mapping of Qwen3Config fields"),
            {"c.yaml": "- 1\n- 2\n"},
            max_lines=1,
        ),
        Case(
            "draft_config_control_characters",
            "6",
            ["draft", "--config", "{dir}/c.yaml", "--world-size", "4"],
            1,
            ("c.yaml", "not valid YAML"),
            {"c.yaml": bytes(range(32))},
            max_lines=1,
        ),
        Case(
            "draft_config_negative_field",
            "6",
            ["draft", "--config", "{dir}/c.yaml", "--world-size", "4"],
            1,
            ("c.yaml",),
            {"c.yaml": "hidden_size: -5\nnum_attention_heads: 2\n"},
        ),
        Case(
            "draft_32b_on_gloo_refused",
            "6",
            ["draft", "--config", "Qwen3-32B", "--world-size", "8", "--layers", "64", "--backend", "gloo"],
            1,
            ("the spec would be refused on this machine: needs ~",),
        ),
        Case(
            "draft_config_bomb",
            "6",
            ["draft", "--config", "{dir}/c.yaml", "--world-size", "4"],
            1,
            ("c.yaml", "aliases expand"),
            {"c.yaml": bomb(9)},
            max_lines=1,
        ),
        Case(
            "draft_o_missing_folder",
            "6",
            ["draft", "--config", "Qwen3-8B", "--world-size", "4", "-o", "{dir}/m/s.yaml"],
            1,
            ("-o", "m/s.yaml: the folder", "does not exist; create it first"),
        ),
        Case(
            "draft_o_is_folder",
            "6",
            ["draft", "--config", "Qwen3-8B", "--world-size", "4", "-o", "{dir}"],
            1,
            ("-o", "is a folder; expected a file path"),
        ),
        Case(
            "draft_o_dev_full",
            "6",
            ["draft", "--config", "Qwen3-8B", "--world-size", "4", "-o", "/dev/full"],
            1,
            ("-o", "/dev/full", "No space left"),
        ),
        Case(
            "draft_layers_over_bound",
            "6",
            ["draft", "--config", "Qwen3-8B", "--world-size", "4", "--layers", "5000"],
            1,
            ("--layers 5,000: over the 1,024 decoder layers",),
        ),
        Case(
            "draft_layers_within_bound_refused",
            "6",
            ["draft", "--config", "Qwen3-8B", "--world-size", "4", "--layers", "1000", "--backend", "gloo"],
            1,
            ("refused", "needs ~"),
        ),
        # malformed command lines (argparse: exit 2, one usage line and one error line)
        Case("cli_no_arguments", "cli", [], 2, ("error",), max_lines=6),
        Case("cli_unknown_command", "cli", ["frobnicate"], 2, ("invalid choice",)),
        Case("cli_run_without_specs", "cli", ["run"], 2, ("required",)),
        Case(
            "cli_backend_unknown", "cli", ["run", "specs/qwen3_walkthrough.yaml", "--backend", "mpi"], 2, ("--backend",)
        ),
        Case(
            "cli_timeout_negative", "cli", ["run", "specs/qwen3_walkthrough.yaml", "--timeout", "-1"], 2, ("--timeout",)
        ),
        Case("cli_timeout_nan", "cli", ["run", "specs/qwen3_walkthrough.yaml", "--timeout", "nan"], 2, ("--timeout",)),
        Case(
            "cli_timeout_word", "cli", ["run", "specs/qwen3_walkthrough.yaml", "--timeout", "soon"], 2, ("--timeout",)
        ),
        Case(
            "cli_render_timeout_zero",
            "cli",
            ["render", "specs/qwen3_walkthrough.yaml", "--timeout", "0"],
            2,
            ("--timeout must be a number of seconds above 0",),
        ),
        Case(
            "cli_render_timeout_nan",
            "cli",
            ["render", "specs/qwen3_walkthrough.yaml", "--timeout", "nan"],
            2,
            ("--timeout must be a number of seconds above 0",),
        ),
        Case(
            "cli_render_timeout_negative",
            "cli",
            ["render", "specs/qwen3_walkthrough.yaml", "--timeout", "-1"],
            2,
            ("--timeout must be a number of seconds above 0",),
        ),
        Case(
            "cli_world_size_zero", "cli", ["draft", "--config", "Qwen3-8B", "--world-size", "0"], 2, ("--world-size",)
        ),
        Case(
            "cli_world_size_word",
            "cli",
            ["draft", "--config", "Qwen3-8B", "--world-size", "four"],
            2,
            ("--world-size",),
        ),
        Case("cli_draft_without_config", "cli", ["draft", "--world-size", "4"], 2, ("--config",)),
        Case("cli_json_without_value", "cli", ["run", "specs/qwen3_walkthrough.yaml", "--json"], 2, ("--json",)),
        Case(
            "cli_render_trace_from_json",
            "cli",
            ["render", "specs/qwen3_walkthrough.yaml", "--from-json", "x.json", "--trace", "t"],
            2,
            ("--trace",),
        ),
        Case("cli_newline_in_spec_name", "cli", ["validate", "{dir}/a\nb.yaml"], 1, ("No such file",), max_lines=3),
    ]
    return cases
