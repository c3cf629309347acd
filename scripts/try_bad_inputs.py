"""Try the command line as a new user would, with bad inputs and faults in real runs (issue 11).

Every case runs ``python -m harness ...`` as a subprocess (fault cases run the same ``main``
inside ``python -c`` with a rank fault from ``tests.support.faults`` registered first: the real
CLI, the real launcher, real gloo ranks), each in its own session and with its own TMPDIR, under
a wall-clock bound. A case is CLEAN when:

- its exit status is the one docs/command-line.md's exit-status table gives for it;
- no ``Traceback`` appears in stdout or stderr (a rank that raised: its own traceback may follow
  a first line that names the rank, what it raised and in which phase; nothing before it);
- (inputs) one line of the output names what it must (the file, key path, flag) and the error
  output is short (a few lines, none over 500 characters);
- it finished within its bound;
- nothing is left: no process of its session still running 3 s after it ended, no
  ``fsdp2-harness-*`` or ``pymp-*`` folder in its TMPDIR.

Usage (about 10 minutes on a loaded 2-core machine; real runs one at a time, except the
concurrency case, which runs two two-rank runs at once)::

    PYTHONPATH=$PWD .venv/bin/python scripts/try_bad_inputs.py            # everything
    PYTHONPATH=$PWD .venv/bin/python scripts/try_bad_inputs.py --inputs   # bad inputs only
    PYTHONPATH=$PWD .venv/bin/python scripts/try_bad_inputs.py --faults   # faults only
    ... -k json                                                              # cases whose name has 'json'
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.run.launch.session import TEMP_PREFIX  # the session folders the harness makes (and sweeps)
from tests.support import REPO
from tests.support.processes import cmdline, comm, descendants, live_processes, stat
from tests.support.specs import TINY, TINY_FAKE, wait_for_waiting_ranks, write_waiting_spec

PY = sys.executable

# --- specs used as bases ------------------------------------------------------------------------

# TINY (4 real ranks, one step entry) and TINY_FAKE (the same simulated): tests.support.specs, as the tests

# two real ranks that wait in their step (tests.support.specs.write_waiting_spec, "slow2.yaml"):
# a signal sent once both wait lands inside the run on any machine

# two real ranks, a small step (for rank faults and the concurrency case)
QUICK2 = """\
spec: quick2
title: two quick ranks
document: a document
backend: gloo
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 2}}
  mesh: {shape: [2], dim_names: [dp]}
  numerics: false
tables:
  - section: "Forward"
    title: shapes
    check: step
    entries:
      - {id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}
"""


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


# --- a case --------------------------------------------------------------------------------------


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
    env: dict[str, str] = field(default_factory=dict)


def _session_processes(sid: int) -> list[int]:
    """Live processes of session ``sid`` (a case's process is its session's leader)."""
    return [pid for pid, fields in live_processes().items() if int(fields[3]) == sid]


def _leftover_folders(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith((TEMP_PREFIX, "pymp-")))


def _env(tmp: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(REPO), COLUMNS="160")
    env.pop("FORCE_COLOR", None)
    env.update(extra or {})
    return env


def _lingering(pid: int, within: float = 3.0) -> list[int]:
    deadline = time.monotonic() + within
    left = _session_processes(pid)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _session_processes(pid)
    for p in left:  # never leave them to the machine: they are this script's
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return left


@dataclass
class Outcome:
    name: str
    kind: str
    clean: bool
    rc: int | None
    seconds: float
    problems: list[str]
    line: str


def _first_error_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:110]
    return ""


def run_input(case: Case, root: Path) -> Outcome:
    folder = root / case.name
    folder.mkdir()
    tmp = folder / "tmp"
    tmp.mkdir()
    for name, content in case.files.items():
        (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    if case.prepare:
        case.prepare(folder)
    argv = [a.replace("{dir}", str(folder)).replace("{spec}", str(folder / "spec.yaml")) for a in case.argv]
    problems: list[str] = []
    started = time.monotonic()
    proc = subprocess.Popen(
        [PY, "-m", "harness", *argv],
        cwd=REPO,
        env=_env(tmp, case.env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=case.bound_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        problems.append(f"over its bound of {case.bound_s:.0f} s")
    seconds = time.monotonic() - started
    text = out + err
    judged = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    problems += _judge_common(case.rc, judged, folder, tmp, proc.pid)
    if case.says and not any(all(s in line for s in case.says) for line in text.splitlines()):
        problems.append(f"no line says {case.says}")
    if proc.returncode not in (0,) and case.rc != 0:
        lines = [line for line in text.splitlines() if line.strip()]
        most = case.max_lines or (6 if case.kind == "cli" else 3)
        if len(lines) > most:
            problems.append(f"{len(lines)} lines of output (at most {most})")
        if any(len(line) > 500 for line in lines):
            problems.append("a line over 500 characters")
    if case.after:
        extra = case.after(folder, judged)
        if extra:
            problems.append(extra)
    return Outcome(case.name, case.kind, not problems, proc.returncode, seconds, problems, _first_error_line(text))


def _judge_common(
    rc, proc: subprocess.CompletedProcess, folder: Path, tmp: Path, *sids: int, frames_ok: bool = False
) -> list[str]:
    problems = []
    wanted = rc if isinstance(rc, tuple) else (rc,)
    if proc.returncode not in wanted:
        problems.append(f"exit {proc.returncode}, docs/command-line.md says {rc}")
    text = proc.stdout + proc.stderr
    if frames_ok:  # the rank's frames may follow the one line that names it; nothing before that line
        text = "\n".join(text.split("\n")[:1])
    if "Traceback" in text:
        problems.append("a Traceback")
    left = [p for sid in sids for p in _lingering(sid)]
    if left:
        problems.append(f"processes left running: {left}")
    folders = _leftover_folders(tmp)
    if folders:
        problems.append(f"temp folders left: {folders}")
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
        v("alias_bomb_5", "1", bomb(5), ("spec.yaml", "aliases expand")),
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
            ("spec.yaml", "needs ~", "GB per rank"),
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
            ("--world-size", "would take ~"),
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
            ("--layers", "1,024"),
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
        # 5. output paths
        Case(
            "json_missing_folder",
            "5",
            ["run", S, "--json", "{dir}/missing/out.json"],
            2,
            ("--json", "does not exist"),
            {"spec.yaml": TINY_FAKE},
        ),
        Case("json_is_folder", "5", ["run", S, "--json", "{dir}"], 2, ("--json", "folder"), {"spec.yaml": TINY_FAKE}),
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
        ),
        Case(
            "json_to_dev_stdout",
            "5",
            ["run", S, "--json", "/dev/stdout"],
            0,
            ('"results"',),
            {"spec.yaml": TINY_FAKE},
            bound_s=120,
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
            ("--trace", "afile"),
            {"spec.yaml": TINY_FAKE, "afile": "x"},
        ),
        Case(
            "trace_parent_is_file",
            "5",
            ["run", S, "--trace", "{dir}/afile/t"],
            2,
            ("--trace", "afile"),
            {"spec.yaml": TINY_FAKE, "afile": "x"},
        ),
        Case(
            "plot_is_a_file",
            "5",
            ["run", S, "--plot", "{dir}/afile"],
            2,
            ("--plot", "afile"),
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
            ("--trace", "afile"),
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
        ),
        Case(
            "render_out_is_a_file",
            "5",
            ["render", S, "--out", "{dir}/afile"],
            2,
            ("--out", "afile"),
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
            ("c.bin", "UTF-8"),
            {"c.bin": bytes(range(256)) * 4},
        ),
        Case(
            "draft_config_malformed",
            "6",
            ["draft", "--config", "{dir}/c.yaml", "--world-size", "4"],
            1,
            ("c.yaml",),
            {"c.yaml": "hidden_size: [1, 2\n"},
        ),
        Case(
            "draft_config_malformed_json",
            "6",
            ["draft", "--config", "{dir}/c.json", "--world-size", "4"],
            1,
            ("c.json", "JSON"),
            {"c.json": '{"hidden_size": 1,,}'},
        ),
        Case("draft_config_folder", "6", ["draft", "--config", "{dir}", "--world-size", "4"], 1, ("folder",)),
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
            "draft_config_bomb",
            "6",
            ["draft", "--config", "{dir}/c.yaml", "--world-size", "4"],
            1,
            ("c.yaml", "aliases expand"),
            {"c.yaml": bomb(9)},
        ),
        Case(
            "draft_o_missing_folder",
            "6",
            ["draft", "--config", "Qwen3-8B", "--world-size", "4", "-o", "{dir}/m/s.yaml"],
            1,
            ("-o", "does not exist"),
        ),
        Case(
            "draft_o_is_folder",
            "6",
            ["draft", "--config", "Qwen3-8B", "--world-size", "4", "-o", "{dir}"],
            1,
            ("-o", "folder"),
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
            ("--layers", "1,024"),
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
            "cli_render_timeout_negative",
            "cli",
            ["render", "specs/qwen3_walkthrough.yaml", "--timeout", "-1"],
            2,
            ("--timeout",),
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


# --- faults in real runs -------------------------------------------------------------------------

INJECT = (
    "import sys\n"
    "from tests.support.faults import Fault, injected\n"
    "from harness.cli import main\n"
    "with injected(Fault(rank={rank}, phase={phase!r}, kind={kind!r})):\n"
    "    code = main(sys.argv[1:])\n"
    "sys.exit(code)\n"
)


_STARTED: list[int] = []  # every CLI a fault case started: each is its own session's leader


def _start(tmp: Path, argv: list[str], inject: dict | None = None) -> subprocess.Popen:
    cmd = [PY, "-c", INJECT.format(**inject)] if inject else [PY, "-m", "harness"]
    proc = subprocess.Popen(
        [*cmd, *argv],
        cwd=REPO,
        env=_env(tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    _STARTED.append(proc.pid)
    return proc


def _start_waiting(folder: Path, *before: Path, extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, bool]:
    """``harness run BEFORE.. slow2.yaml EXTRA..``: its last spec's two gloo ranks wait in their
    step; returns the CLI and whether both got there."""
    spec = write_waiting_spec(folder, "gloo", "slow2.yaml")
    proc = _start(folder / "tmp", ["run", *map(str, before), str(spec), *extra])
    try:
        wait_for_waiting_ranks(folder, 2, proc, timeout=240)
    except AssertionError:
        return proc, False
    return proc, True


@dataclass
class Fault:
    name: str
    rc: int | tuple[int, ...]
    says: tuple[str, ...]
    bound_s: float
    body: Callable[[Path], tuple[subprocess.CompletedProcess, list[str]]]  # the run and extra problems
    frames_ok: bool = False  # a rank's own traceback may follow a first line that names the rank and what it raised


def _communicate(proc: subprocess.Popen, bound: float) -> tuple[subprocess.CompletedProcess, list[str]]:
    try:
        out, err = proc.communicate(timeout=bound)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), []
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), [f"not over within {bound:.0f} s"]


def _signal_case(sig: int, to_group: bool, twice: bool = False):
    def body(folder: Path):
        proc, waiting = _start_waiting(folder)
        if not waiting:
            return _communicate(proc, 30)[0], ["the ranks did not start"]
        (os.killpg if to_group else os.kill)(proc.pid, sig)
        if twice:
            time.sleep(0.3)
            try:
                (os.killpg if to_group else os.kill)(proc.pid, sig)
            except ProcessLookupError:
                pass
        done, problems = _communicate(proc, 60)
        return done, problems

    return body


def _sigkill_then_next(folder: Path):
    tmp = folder / "tmp"
    proc, waiting = _start_waiting(folder)
    if not waiting:
        return _communicate(proc, 30)[0], ["the ranks did not start"]
    family = descendants(proc.pid)
    proc.kill()
    _communicate(proc, 60)
    problems = []
    time.sleep(2)
    alive = [p for p in family if Path(f"/proc/{p}").exists() and _state(p) != "Z"]
    if alive:
        problems.append(f"ranks/forkserver still running 2 s after the SIGKILL: {alive}")
    # leftovers from a SIGKILL are allowed; the next run must remove them
    quick = folder / "quick2.yaml"
    quick.write_text(QUICK2)
    nxt = _start(tmp, ["run", str(quick)])
    done, more = _communicate(nxt, 240)
    return done, problems + more


def _state(pid: int) -> str:
    fields = stat(pid)
    return fields[0] if fields else "gone"


def _injected(rank: int, phase: str, kind: str, extra: tuple[str, ...] = ()):
    def body(folder: Path):
        spec = folder / "quick2.yaml"
        spec.write_text(QUICK2)
        proc = _start(folder / "tmp", ["run", str(spec), *extra], {"rank": rank, "phase": phase, "kind": kind})
        return _communicate(proc, 240)

    return body


def _kill_a_rank(folder: Path):
    proc, waiting = _start_waiting(folder)
    if not waiting:
        return _communicate(proc, 30)[0], ["the ranks did not start"]
    ranks = [p for p in descendants(proc.pid) if b"fsdp2-rank" in cmdline(p) or comm(p).startswith("fsdp2-rank")]
    if not ranks:  # the last started descendant is a rank
        ranks = descendants(proc.pid)[-1:]
    os.kill(ranks[-1], signal.SIGKILL)
    return _communicate(proc, 120)


def _concurrent(folder: Path):
    spec = folder / "quick2.yaml"
    spec.write_text(QUICK2)
    a, b = folder / "a.json", folder / "b.json"
    first = _start(folder / "tmp", ["run", str(spec), "--json", str(a)])
    second = _start(folder / "tmp", ["run", str(spec), "--json", str(b)])
    done_a, pa = _communicate(first, 300)
    done_b, pb = _communicate(second, 300)
    problems = pa + pb
    if done_b.returncode != 0:
        problems.append(
            f"the second run exited {done_b.returncode}: {_first_error_line(done_b.stdout + done_b.stderr)}"
        )
    if "Traceback" in done_b.stdout + done_b.stderr:
        problems.append("a Traceback in the second run")
    problems += [f"{p.name} missing" for p in (a, b) if not p.exists()]
    return done_a, problems


def _json_after_interrupt(folder: Path):
    first = folder / "first.yaml"
    first.write_text(TINY_FAKE.replace("spec: tiny", "spec: first"))
    target = folder / "results.json"
    proc, waiting = _start_waiting(folder, first, extra=("--json", str(target)))
    if not waiting:
        return _communicate(proc, 30)[0], ["the ranks did not start"]
    os.killpg(proc.pid, signal.SIGINT)
    done, problems = _communicate(proc, 60)
    try:
        payload = json.loads(target.read_text())
        if (
            payload.get("interrupted") is not True
            or payload.get("finished_specs") != [str(first)]
            or not payload["results"]
        ):
            problems.append(f"--json holds {sorted(payload)}, finished {payload.get('finished_specs')}")
    except (OSError, ValueError) as exc:
        problems.append(f"--json not kept: {exc}")
    return done, problems


def _interrupt_while_simulating(folder: Path):
    spec = write_waiting_spec(folder, "fake", "fake.yaml", seconds=3)  # simulated rank 0 waits 3 s in its step
    proc = _start(folder / "tmp", ["run", str(spec)])
    try:
        wait_for_waiting_ranks(folder, 1, proc, timeout=240)
    except AssertionError:
        return _communicate(proc, 30)[0], ["the simulated rank did not start its step"]
    os.killpg(proc.pid, signal.SIGINT)
    return _communicate(proc, 60)


def _interrupt_after_the_report(folder: Path):
    """Ctrl-C just after the report: the run finished, its status stands (0), or 130 if main
    had not returned yet; never a silent death by SIGINT (-2)."""
    spec = folder / "fake.yaml"
    spec.write_text(TINY_FAKE)
    proc = _start(folder / "tmp", ["run", str(spec)])
    for line in proc.stdout:
        if "passed" in line and "failed" in line:
            break
    time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    return _communicate(proc, 60)


def _interrupt_while_importing(folder: Path):
    proc = _start(folder / "tmp", ["run", "specs/qwen3_walkthrough.yaml"])
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    return _communicate(proc, 60)


def _normal_exit(folder: Path):
    spec = folder / "quick2.yaml"
    spec.write_text(QUICK2)
    proc = _start(folder / "tmp", ["run", str(spec)])
    done, problems = _communicate(proc, 240)
    left = _session_processes(proc.pid)  # at once: nothing may outlive the CLI
    if left:
        problems.append(f"processes outlived the CLI: {[(p, comm(p)) for p in left]}")
    return done, problems


def faults() -> list[Fault]:
    return [
        Fault("ctrl_c_to_group", 130, ("interrupted",), 300, _signal_case(signal.SIGINT, True)),
        Fault("sigint_to_cli", 130, ("interrupted",), 300, _signal_case(signal.SIGINT, False)),
        Fault("ctrl_c_twice", 130, ("interrupted",), 300, _signal_case(signal.SIGINT, True, twice=True)),
        Fault("sigterm", 143, ("terminated",), 300, _signal_case(signal.SIGTERM, False)),
        Fault("sigkill_then_next_run_cleans", 0, ("quick2",), 600, _sigkill_then_next),
        Fault(
            "rank_raises",
            2,
            ("quick2.yaml: the run failed: rank 1 failed: RuntimeError: injected fault", "forward"),
            300,
            _injected(1, "forward", "raise"),
            frames_ok=True,
        ),
        Fault(
            "rank_raises_in_optimizer",
            2,
            ("rank 0 failed: RuntimeError", "optimizer"),
            300,
            _injected(0, "optimizer", "raise"),
            frames_ok=True,
        ),
        Fault("rank_exits", 2, ("rank 1 died",), 300, _injected(1, "backward", "exit")),
        Fault(
            "rank_hangs_in_setup_timeout",
            2,
            ("timed out after 20 s",),
            300,
            _injected(0, "setup", "hang", ("--timeout", "20")),
        ),
        Fault(
            "rank_hangs_timeout",
            2,
            ("timed out after 20 s", "rank 1"),
            300,
            _injected(1, "backward", "hang", ("--timeout", "20")),
        ),
        Fault("rank_sigkilled_from_outside", 2, ("rank",), 300, _kill_a_rank),
        Fault("two_concurrent_runs", 0, ("quick2",), 600, _concurrent),
        Fault("json_kept_after_interrupt", 130, ("interrupted",), 300, _json_after_interrupt),
        Fault("ctrl_c_while_simulating", 130, ("interrupted",), 300, _interrupt_while_simulating),
        Fault("ctrl_c_after_the_report", (0, 130), (), 120, _interrupt_after_the_report),
        Fault("ctrl_c_while_importing", 130, ("interrupted",), 120, _interrupt_while_importing),
        Fault("normal_exit_leaves_nothing", 0, ("quick2",), 300, _normal_exit),
    ]


def run_fault(fault: Fault, root: Path) -> Outcome:
    folder = root / fault.name
    folder.mkdir()
    (folder / "tmp").mkdir()
    started = time.monotonic()
    _STARTED.clear()
    done, problems = fault.body(folder)
    seconds = time.monotonic() - started
    if seconds > fault.bound_s:
        problems.append(f"over its bound of {fault.bound_s:.0f} s")
    problems += _judge_common(fault.rc, done, folder, folder / "tmp", *_STARTED, frames_ok=fault.frames_ok)
    text = done.stdout + done.stderr
    lines = text.splitlines()[:1] if fault.frames_ok else text.splitlines()
    if fault.says and not any(all(s in line for s in fault.says) for line in lines):
        problems.append(f"no line says {fault.says}")
    return Outcome(
        fault.name,
        "7" if "rank" not in fault.name else "7/run",
        not problems,
        done.returncode,
        seconds,
        problems,
        _first_error_line(done.stderr if done.returncode in (130, 143) else text),
    )


# --- main ----------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", action="store_true", help="bad inputs only")
    parser.add_argument("--faults", action="store_true", help="faults in real runs only")
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    parser.add_argument("--keep", action="store_true", help="keep the cases' folders")
    args = parser.parse_args()
    # A background job of a non-interactive shell starts with SIGINT ignored, and children keep an
    # ignored signal across exec: the CLIs would then never see the Ctrl-C cases' SIGINT. A handler
    # of our own is reset to the default in them instead.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    both = not (args.inputs or args.faults)
    root = Path(tempfile.mkdtemp(prefix="try-bad-inputs-"))
    outcomes: list[Outcome] = []
    try:
        if args.inputs or both:
            for case in inputs():
                if args.k in case.name:
                    outcomes.append(run_input(case, root))
                    _print(outcomes[-1])
        n_inputs = len(outcomes)
        if args.faults or both:
            for fault in faults():
                if args.k in fault.name:
                    outcomes.append(run_fault(fault, root))
                    _print(outcomes[-1])
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"cases kept in {root}")
    ins, fls = outcomes[:n_inputs], outcomes[n_inputs:]
    print()
    print(f"{'':28}{'tried':>7}{'clean':>7}")
    print(f"{'bad inputs':28}{len(ins):>7}{sum(o.clean for o in ins):>7}")
    print(f"{'faults in real runs':28}{len(fls):>7}{sum(o.clean for o in fls):>7}")
    kinds = sorted({o.kind for o in ins})
    for kind in kinds:
        group = [o for o in ins if o.kind == kind]
        print(f"{'  inputs, kind ' + kind:28}{len(group):>7}{sum(o.clean for o in group):>7}")
    return 0 if all(o.clean for o in outcomes) else 1


def _print(o: Outcome) -> None:
    mark = "CLEAN" if o.clean else "NOT CLEAN"
    print(f"{mark:10} {o.kind:5} {o.name:34} exit {str(o.rc):>4} {o.seconds:6.1f} s  {o.line}", flush=True)
    for p in o.problems:
        print(f"{'':17}- {p}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
