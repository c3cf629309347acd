"""Every bad input ends in one clear line, within bounds (issue 11), by kind.

The corpus of bad inputs (tests/support/bad_inputs.py) runs here in-process, each case that starts
no rank; scripts/try_bad_inputs.py runs all of it as subprocesses. The tests below pin exact
messages and what the corpus cannot show. Each kind has the issue's example and variants:

1. bounded loading: alias bombs, recursive aliases, deep nesting, oversized files, long lines;
2. bytes that are not UTF-8: ``file:line: not UTF-8 text (byte 0xff at offset N)``;
3. resources: the pre-flight check refuses a run this machine cannot hold, before any process;
5. output paths: ``--json`` / ``-o`` checked before any work, results never lost;
6. ``draft --config`` files: binary, malformed, a folder;
8. fields that depend on thread timing cannot be asserted on a real backend.

Kind 7 (interruption, real ranks) is in tests/cli/test_interrupt.py. Exit status as in
docs/command-line.md's table, no Python traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.load.setup import RunSetup
from harness.load.spec import SpecError, load_spec
from harness.load.yaml_safe import MAX_ALIAS_NODES, MAX_BYTES, MAX_DEPTH, YamlFileError, load_text, read_text
from harness.run import preflight
from harness.run.preflight import PreflightError
from tests.support import REPO, WALKTHROUGH
from tests.support.bad_inputs import Case, bomb, inputs, materialize, output_problems
from tests.support.cli import cli, no_traceback
from tests.support.specs import TINY, TINY_FAKE_2
from tests.support.specs import write_spec as write

pytest_plugins = ["pytester"]

GOOD = WALKTHROUGH.read_text(encoding="utf-8")


def load_error(path: Path) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_spec(path)
    return info.value


# --- the corpus (tests/support/bad_inputs.py), in-process ---------------------------------------


@pytest.mark.parametrize("case", [c for c in inputs() if not c.launches], ids=lambda c: c.name)
def test_a_bad_input_is_answered_cleanly(case: Case, tmp_path, capsys, monkeypatch):
    """Every corpus case that starts no rank, through ``harness.cli.main`` as ``python -m harness``
    runs it: its exit status, one line naming what it must, no traceback, short output.
    scripts/try_bad_inputs.py runs the same cases as subprocesses."""
    monkeypatch.chdir(REPO)  # the cli cases name specs/ relative to the checkout
    monkeypatch.setenv("COLUMNS", "160")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    argv = materialize(case, tmp_path)
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse
        status = exc.code
    out, err = capsys.readouterr()
    assert not output_problems(case, subprocess.CompletedProcess(argv, status, out, err), tmp_path), out + err


def test_a_wrong_expectation_makes_a_case_unclean(tmp_path):
    """The corpus's judge fails each way it can: status, the line's words, a traceback, the length."""
    case = Case("c", "4", ["validate", "{spec}"], 1, ("spec.yaml:3", "shape"))
    clean = subprocess.CompletedProcess([], 1, "✗ spec.yaml:3: tables[0]: shape: expected a list\n", "")
    assert output_problems(case, clean, tmp_path) == []
    status = subprocess.CompletedProcess([], 2, clean.stdout, "")
    assert output_problems(case, status, tmp_path) == ["exit 2, docs/command-line.md says 1"]
    words = subprocess.CompletedProcess([], 1, "✗ spec.yaml:4: shape\n", "")
    assert output_problems(case, words, tmp_path) == ["no line says ('spec.yaml:3', 'shape')"]
    frames = subprocess.CompletedProcess([], 1, clean.stdout, "Traceback (most recent call last):\n")
    assert output_problems(case, frames, tmp_path) == ["a Traceback"]
    long = subprocess.CompletedProcess([], 1, clean.stdout + "more\n" * 3 + "x" * 501 + "\n", "")
    assert output_problems(case, long, tmp_path) == ["5 lines of output (at most 3)", "a line over 500 characters"]


# --- 1. bounded loading --------------------------------------------------------------------------


def test_alias_bomb_of_nine_levels_is_refused_at_once(tmp_path):
    """The issue's example: nine nested levels of &a [*a, *a, ...] hung validate at 5 GB."""
    path = write(tmp_path, bomb(9))
    started = time.monotonic()
    err = load_error(path)
    assert time.monotonic() - started < 5  # it is refused on the event stream, not expanded
    assert f"aliases expand to over {MAX_ALIAS_NODES:,} nodes" in str(err) and str(err).startswith(f"{path}:")
    proc = cli("validate", str(path), timeout=60)
    assert proc.returncode == 1 and "alias bomb" in proc.stdout
    no_traceback(proc)


def test_recursive_alias_and_undefined_alias(tmp_path):
    err = load_error(write(tmp_path, "spec: &a [1, *a]\n"))
    assert "recursive alias *a" in str(err) and err.line == 1
    err = load_error(write(tmp_path, "spec: x\ntitle: *nope\n"))
    assert "alias *nope names no anchor before it" in str(err) and err.line == 2


def test_deep_nesting_is_refused_without_recursion_error(tmp_path):
    for depth in (MAX_DEPTH + 1, 5000, 200_000):
        err = load_error(write(tmp_path, "spec: " + "[" * depth + "]" * depth + "\n"))
        assert f"nested deeper than {MAX_DEPTH} levels" in str(err)


def test_small_aliases_within_the_budget_load(tmp_path):
    text = TINY.replace("  model: {config: walkthrough", "  model: &m {config: walkthrough")
    text += (
        '  - section: "Again"\n    title: again\n    check: step\n    with: &w {layer: 0}\n    entries:\n'
        "      - {id: y, step: step1.x_norm, shape: [2, 8, 512]}\n"
    )
    assert len(load_spec(write(tmp_path, text)).items) == 2


def test_oversized_and_non_regular_files(tmp_path):
    err = load_error(write(tmp_path, "# " + "x" * MAX_BYTES + "\n"))
    assert f"a spec may be at most {MAX_BYTES:,} bytes" in str(err)
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    assert "a folder with no spec file (.yaml or .yml) below it" in str(load_error(folder))
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert "is not a regular file" in str(load_error(fifo))  # and it did not block
    assert "is not a regular file" in str(load_error(Path("/dev/zero")))


def test_collection_as_a_mapping_key_is_refused(tmp_path):
    for text in ("? [a, b]\n: c\n", "spec: x\nsetup: {? {a: 1} : 2}\n", "k: &k [1]\n*k : 2\n"):
        assert "a mapping key must be a plain value" in str(load_error(write(tmp_path, text)))


def test_long_error_lines_are_cut_and_many_errors_capped(tmp_path):
    text = TINY.replace("mesh: {shape: [4], dim_names: [dp]}", "mesh: {shape: [" + ", ".join(["4"] * 3000) + "]}")
    err = load_error(write(tmp_path, text))
    assert all(len(line) <= 400 for line in str(err).splitlines())
    assert "more characters)" in str(err)
    many = TINY + "".join(f"      - {{id: e{i}, step: nope{i}, shape: [1]}}\n" for i in range(120))
    err = load_error(write(tmp_path, many))
    assert len(err.errors) == 120
    assert len(str(err).splitlines()) == 51 and str(err).splitlines()[-1].endswith("... and 70 more errors")


def test_alias_bomb_is_one_failing_pytest_item(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    pytester.mkdir("specs")
    (pytester.path / "specs" / "bomb.yaml").write_text(bomb(9))
    (pytester.path / "specs" / "latin1.yaml").write_bytes("spec: x\ntitle: caf\u00e9\n".encode("latin-1"))
    result = pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "aliases expand to over" in out and "not UTF-8 text (byte 0xe9 at offset 18)" in out
    assert "Traceback" not in out and "INTERNALERROR" not in out


# --- 2. bytes that are not UTF-8 -----------------------------------------------------------------


@pytest.mark.parametrize(
    "data, byte, offset, line",
    [
        (b"spec: x\ntitle: \xff\n", 0xFF, 15, 2),  # the example
        ("spec: x\ntitle: caf\u00e9\n".encode("latin-1"), 0xE9, 18, 2),  # Latin-1 é
        ("spec: x\n".encode("utf-16"), 0xFF, 0, 1),  # UTF-16 with its byte-order mark
        (b"spec: x\ntitle: ok\ndocument: \xc3(\n", 0xC3, 28, 3),  # a truncated UTF-8 sequence
    ],
)
def test_non_utf8_bytes_name_the_byte_and_offset(tmp_path, data, byte, offset, line):
    path = write(tmp_path, data)
    err = load_error(path)
    assert str(err) == f"{path}:{line}: not UTF-8 text (byte 0x{byte:02x} at offset {offset})"


def test_control_characters_are_one_line(tmp_path):
    err = load_error(write(tmp_path, b"spec: x\x00\n"))
    assert str(err).endswith(
        "spec.yaml: not valid YAML: character U+0000 at character offset 7 is not allowed in YAML text"
    )


# --- 3. resources: the pre-flight check ------------------------------------------------------------


def test_100000_gloo_ranks_are_refused_before_any_process(tmp_path):
    """The issue's example: mesh [100000] on gloo validated and then started spawning."""
    path = write(
        tmp_path,
        TINY.replace("mesh: {shape: [4], dim_names: [dp]}", "mesh: {shape: [100000], dim_names: [dp]}").replace(
            "tables:", "backend: gloo\ntables:"
        ),
    )
    assert cli("validate", str(path)).returncode == 0  # valid as a spec: a cluster may run it
    started = time.monotonic()
    proc = cli("run", str(path), env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 2
    assert (
        f"100,000 ranks would start 100,000 processes on this machine, over its limit of {preflight.process_limit()}"
        in proc.stdout
    )
    assert "use --backend fake to simulate it" in proc.stdout
    assert time.monotonic() - started < 60
    assert not list(tmp_path.glob("fsdp2-harness-*")) and not list(tmp_path.glob("pymp-*"))  # nothing launched
    no_traceback(proc)


HUGE_WORLD = TINY.replace("mesh: {shape: [4], dim_names: [dp]}", "mesh: {shape: [100000], dim_names: [dp]}")


def test_a_world_too_big_for_processes_runs_simulated_as_its_hint_says(tmp_path):
    """Issue 41 item 5: the hint was --backend fake, which refused it again (over 65,536 ranks) with a
    hint of --no-preflight, which on a real backend would start 100,000 processes."""
    path = write(tmp_path, HUGE_WORLD)
    refused = cli("run", str(path), env={"TMPDIR": str(tmp_path)})
    assert refused.returncode == 2
    assert "over its limit of" in refused.stdout and "; use --backend fake to simulate it (~" in refused.stdout
    assert "--no-preflight" not in refused.stdout
    simulated = cli("run", str(path), "--backend", "fake", timeout=600)
    assert simulated.returncode == 0, simulated.stdout + simulated.stderr
    assert "tiny: 1 passed" in simulated.stdout
    no_traceback(refused)


def test_a_refused_spec_is_said_once_under_pytest(pytester, monkeypatch):
    """Issue 41 item 5: the refusal was repeated by every entry (32 times)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    pytester.mkdir("specs")
    entries = "".join(f"      - {{id: x_norm_{i}, step: step1.x_norm, shape: [2, 8, 512]}}\n" for i in range(3))
    (pytester.path / "specs" / "huge.yaml").write_text(
        HUGE_WORLD.replace("tables:", "backend: gloo\ntables:").replace(
            "      - {id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}\n", entries
        )
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", timeout=120)
    result.assert_outcomes(failed=1, skipped=2)
    out = result.stdout.str()
    assert out.count("100,000 ranks would start 100,000 processes") == 1, out
    assert "use --fsdp2-backend fake to simulate it (~" in out and "no-preflight" not in out
    assert "the pre-flight check refused this spec's run (said once, by its first item to run)" in out


def test_memory_check_against_a_given_machine():
    setup = RunSetup()  # the walkthrough: a few MB of tensors per rank
    est = preflight.check(setup, "gloo", memory=64 * 10**9)
    assert est.per_rank < 10**9 and est.params == est.grads == 2 * 1_180_224  # two layers' padded shards
    with pytest.raises(PreflightError, match=r"needs ~0\.\d GB per rank × 4 ranks, 0\.5 GB available"):
        preflight.check(setup, "gloo", memory=5 * 10**8)
    big = RunSetup.from_mapping({"model": {"config": "Qwen3-32B", "overrides": {"num_hidden_layers": 4}}})
    with pytest.raises(PreflightError, match="GB per rank × 4 ranks"):
        preflight.check(big, "auto", memory=24 * 10**9, gpus=[])
    # NCCL: the tensors per rank against each GPU's free memory, the host holds the processes
    with pytest.raises(PreflightError, match="of GPU memory per rank"):
        preflight.check(big, "nccl", memory=10**12, gpus=[10**9] * 4)
    assert preflight.check(big, "nccl", memory=10**12, gpus=[10**12] * 4) is not None


def test_preflight_on_a_host_without_gpu_device_nodes_does_not_import_torch():
    """The CLI's process does not need torch for a CPU run (the ranks' forkserver imports it):
    the GPU question costs no import where no /dev/nvidia<N> or /dev/kfd exists."""
    code = (
        "import sys; from harness.load.setup import RunSetup; from harness.run import preflight\n"
        "preflight._gpu_device_nodes = lambda: False\n"
        "preflight.check(RunSetup(), 'auto'); sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr or "the pre-flight check imported torch"


def test_estimate_grows_with_what_each_rank_holds():
    base = preflight.estimate(RunSetup.from_mapping({"numerics": False}))
    adamw = preflight.estimate(RunSetup.from_mapping({"numerics": False, "optimizer": {"name": "adamw"}}))
    assert adamw.optimizer == 2 * adamw.params and base.optimizer == 0
    kept = preflight.estimate(
        RunSetup.from_mapping(
            {
                "numerics": False,
                "fsdp": {"reshard_after_forward": False},
                "model": {"overrides": {"num_hidden_layers": 6}},
            }
        )
    )
    assert kept.gathered == 6 * 4_720_896  # every layer's gathered parameters, fp16
    replica = preflight.estimate(RunSetup.from_mapping({"numerics": True}))
    assert replica.replica > 0 and base.replica == 0
    # numerics_reference: rank_0 moves the replica off every rank onto rank 0, counted once
    one = preflight.estimate(RunSetup.from_mapping({"numerics": True, "numerics_reference": "rank_0"}))
    assert one.replica <= replica.replica and one.replica_once > replica.replica and replica.replica_once == 0


def test_simulated_world_bound_and_override(pinned_fake_run):
    """No fixed cap: the simulation's own estimate against the run's timeout and this machine's memory."""
    big = RunSetup.from_mapping({"mesh": {"shape": [131_072]}})
    est = preflight.check(big, "fake", memory=64 * 10**9)
    assert est.seconds < 300 and est.parameters == 22 and est.world_size == 131_072
    with pytest.raises(PreflightError, match=r"would take ~\d+ s for 1 simulated rank.*over the run's timeout of 5 s"):
        preflight.check(big, "fake", timeout_s=5, memory=64 * 10**9)
    with pytest.raises(PreflightError, match=r"needs ~\d\.\d GB in this process .*, 0\.1 GB available"):
        preflight.check(big, "fake", memory=10**8)
    assert preflight.check(big, "gloo", joined=True) is None  # torchrun chose the processes
    # --no-preflight reaches the runner (the fake run of a small world, tests/cli/conftest.py)
    assert pinned_fake_run.proc.returncode == 0, pinned_fake_run.proc.stdout + pinned_fake_run.proc.stderr


def test_no_preflight_is_a_pytest_option(pytester, monkeypatch, plugin_help):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    pytester.mkdir("specs")
    (pytester.path / "specs" / "huge.yaml").write_text(
        TINY.replace("mesh: {shape: [4], dim_names: [dp]}", "mesh: {shape: [100000], dim_names: [dp]}").replace(
            "tables:", "backend: gloo\ntables:"
        )
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(failed=1)
    assert "100,000 ranks would start 100,000 processes" in result.stdout.str()
    assert "--fsdp2-no-preflight" in plugin_help


def test_a_draft_this_machine_cannot_hold_is_drafted_for_the_fake_backend():
    """Asked for gloo, the corpus's draft_32b_on_gloo_refused; with the backend left to it, simulated."""
    proc = cli("draft", "--config", "Qwen3-32B", "--world-size", "8", "--layers", "64")
    assert proc.returncode == 0 and "\nbackend: fake\n" in proc.stdout
    assert "note: drafted for the fake backend" in proc.stderr
    no_traceback(proc)


# --- 5. output paths ----------------------------------------------------------------------------------


def test_results_are_kept_when_the_json_cannot_be_written_after_the_run(tmp_path, monkeypatch):
    from rich.console import Console

    from harness.cli.run import save_results

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    console = Console(record=True, width=400)
    gone = tmp_path / "gone"  # the folder was there at the start and removed during the run
    assert save_results(console, str(gone / "out.json"), {"results": [1, 2, 3]}) is False
    kept = list(tmp_path.glob("fsdp2-results-*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == {"results": [1, 2, 3]}
    assert f"results kept in {kept[0]}" in console.export_text()
    assert save_results(console, str(tmp_path / "ok.json"), {"a": 1}) is True
    assert json.loads((tmp_path / "ok.json").read_text()) == {"a": 1}
    assert not list(tmp_path.glob(".ok.json.*"))  # written through a temporary file, replaced whole


def test_json_of_a_fake_run_is_written(pinned_fake_run):
    proc, payload = pinned_fake_run.proc, pinned_fake_run.payload  # tests/cli/conftest.py
    assert proc.returncode == 0 and payload is not None, proc.stdout + proc.stderr
    assert [r["id"] for r in payload["results"]] == ["x_norm"] and "interrupted" not in payload


# --- 6. draft input files ---------------------------------------------------------------------------


def test_yaml_safe_reads_are_bounded(tmp_path):
    with pytest.raises(YamlFileError, match="cannot read file: No such file or directory"):
        read_text(tmp_path / "nope.yaml")
    node, data = load_text("a: &x 1\nb: *x\n")
    assert data == {"a": 1, "b": 1}
    with pytest.raises(YamlFileError, match="expected a single document in the stream but found another document"):
        load_text("a: 1\n---\nb: 2\n")


# --- 8. timing-dependent fields ----------------------------------------------------------------------

MEMORY = (
    TINY
    + """\
  - section: "Memory"
    check: memory
    with: {layer: 0}
    entries:
      - {id: m, state: "After Post-Backward", FIELD}
"""
)


@pytest.mark.parametrize("field", ["temp: 0", 'total: "4.72 MB"', "temp: 0, unsharded_param: 0"])
def test_timing_dependent_memory_fields_are_refused_on_real_backends(tmp_path, field):
    """The issue's example: rank 2's temp bytes after post-backward were 4,720,896 once, 0 otherwise."""
    text = MEMORY.replace("FIELD", field)
    err = load_error(write(tmp_path, text))
    name = field.split(":")[0]
    assert f"entry 'm': '{name}' depends on thread timing on a real backend" in str(err)
    assert err.line == text.splitlines().index('      - {id: m, state: "After Post-Backward", ' + field + "}") + 1
    load_spec(write(tmp_path, text.replace("tables:", "backend: fake\ntables:")))  # simulated: deterministic


def test_timing_dependent_fields_are_named_in_the_field_declarations(tmp_path):
    from harness.contract import fields

    varying = {f.path for f in fields.varying_in("gloo") if f.aspect == "behaviour"}
    assert {"memory.bytes.temp", "memory.bytes.total"} <= varying
    assert "4,720,896" in fields.lookup("memory.bytes.temp").varies
    assert fields.stable("memory.bytes.temp", "fake")
    load_spec(write(tmp_path, MEMORY.replace("FIELD", "unsharded_param: 0")))  # other categories load


def test_draft_no_preflight_writes_what_the_check_would_refuse(tmp_path):
    out = tmp_path / "big.yaml"
    proc = cli(
        "draft",
        "--config",
        "Qwen3-32B",
        "--world-size",
        "8",
        "--layers",
        "64",
        "--backend",
        "gloo",
        "--no-preflight",
        "-o",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert load_spec(out).backend == "gloo"


def test_a_harness_error_in_a_later_spec_keeps_the_earlier_results(tmp_path, monkeypatch):
    """Results already computed are written before the error (a harness bug) is raised."""
    import harness.judge.evaluate as evaluate
    from harness.cli import main

    first, second = (
        write(tmp_path, TINY_FAKE_2, "first.yaml"),
        write(tmp_path, TINY_FAKE_2, "second.yaml"),
    )
    real, calls = evaluate.evaluate_spec, []

    def flaky(spec, observation):
        calls.append(spec.path)
        if len(calls) == 2:
            raise RuntimeError("a bug in the checks")
        return real(spec, observation)

    monkeypatch.setattr(evaluate, "evaluate_spec", flaky)
    target = tmp_path / "out.json"
    with pytest.raises(RuntimeError, match="a bug in the checks"):
        main(["run", str(first), str(second), "--json", str(target)])
    payload = json.loads(target.read_text())
    assert payload["finished_specs"] == [str(first)] and [r["id"] for r in payload["results"]] == ["x_norm"]


# --- audit (scripts/try_bad_inputs.py): kinds that still failed after the first fixes ---------


@pytest.mark.parametrize(
    "model, key",
    [
        ("{config: walkthrough, overrides: {num_hidden_layers: 1000000}}", "setup.model.overrides"),  # busy past 60 s
        ("{config: walkthrough, overrides: {num_hidden_layers: 1000000000000}}", "setup.model.overrides"),
        (
            "{config: {hidden_size: 64, intermediate_size: 128, num_attention_heads: 4, num_key_value_heads: 2, "
            "head_dim: 16, vocab_size: 128, num_hidden_layers: 5000}}",
            "setup.model.config",
        ),
    ],
)
def test_a_layer_count_past_the_bound_is_a_load_error(tmp_path, model, key):
    """Loading walks every module of every layer: a million layers kept validate and run busy
    for minutes. Over MAX_LAYERS it is one load error naming the key that set it."""
    from harness.load.spec import MAX_LAYERS

    path = write(tmp_path, TINY.replace("{config: walkthrough, overrides: {num_hidden_layers: 2}}", model))
    started = time.monotonic()
    err = load_error(path)
    assert time.monotonic() - started < 10
    assert (
        err.line == 5
        and f"{key}: num_hidden_layers" in str(err)
        and f"over the {MAX_LAYERS:,} decoder layers" in str(err)
    )


def test_a_view_that_cannot_be_written_after_the_run_is_one_line(tmp_path, monkeypatch):
    import argparse

    from rich.console import Console

    import harness.report.plot as plot
    from harness.cli.views import write_views

    def full(*_a, **_k):
        raise OSError(28, "No space left on device", str(tmp_path / "plots" / "x.png"))

    monkeypatch.setattr(plot, "plot_memory", full)
    console = Console(record=True, width=400)
    args = argparse.Namespace(trace=None, plot=str(tmp_path / "plots"))
    assert write_views(args, load_spec(write(tmp_path, TINY)), {}, console) is False
    assert console.export_text().strip() == f"✗ {tmp_path / 'plots' / 'x.png'}: cannot write (No space left on device)"


def test_writes_to_devices_and_links_go_where_they_point(tmp_path):
    """Writing 'atomically' replaced the path with a new file: as root, `draft -o /dev/full`
    replaced the device /dev/full with a regular file and said "wrote". A device or pipe is
    written in place now; a link to a file keeps the link. (Links in tmp_path stand for the
    devices: were the fix undone, only the links would be replaced.)"""
    from harness.report.output import write_atomically

    full, null = tmp_path / "full", tmp_path / "null"
    full.symlink_to("/dev/full")
    null.symlink_to("/dev/null")
    with pytest.raises(OSError) as info:
        write_atomically(full, "x")
    assert info.value.errno == 28 and full.is_symlink()
    write_atomically(null, "x")
    assert null.is_symlink() and null.resolve() == Path("/dev/null")
    # --no-preflight: what is drafted must not depend on this machine's free memory (a low one adds a note)
    proc = cli("draft", "--config", "Qwen3-8B", "--world-size", "4", "--no-preflight", "-o", str(full), timeout=60)
    assert (proc.returncode, proc.stderr.strip()) == (1, f"✗ -o {full}: cannot write: No space left on device")
    assert full.is_symlink() and Path("/dev/full").is_char_device()
    target, link = tmp_path / "real.yaml", tmp_path / "link.yaml"
    link.symlink_to(target)
    write_atomically(link, "a: 1\n")
    assert link.is_symlink() and target.read_text() == "a: 1\n"
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())  # not mkstemp's 0600
    target.chmod(0o640)
    write_atomically(target, "a: 2\n")
    assert target.stat().st_mode & 0o777 == 0o640 and target.read_text() == "a: 2\n"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_json_into_a_device_that_fails_keeps_the_results(tmp_path):
    """--json to a path that passes the check but cannot be written after the run: the results
    go to a fsdp2-results-*.json in the temporary folder, named on screen, exit 2."""
    full = tmp_path / "full"
    full.symlink_to("/dev/full")
    spec = write(tmp_path, TINY_FAKE_2)
    proc = cli("run", str(spec), "--json", str(full), env={"TMPDIR": str(tmp_path)})
    assert (
        proc.returncode == 2
        and f"--json {full}: cannot write (No space left on device); results kept in" in proc.stdout
    )
    kept = list(tmp_path.glob("fsdp2-results-*.json"))
    assert len(kept) == 1 and [r["id"] for r in json.loads(kept[0].read_text())["results"]] == ["x_norm"]
    assert full.is_symlink()
    no_traceback(proc)


def test_a_failed_rank_is_one_line_before_its_frames():
    """A rank that raised printed '✗ spec: the run failed:' and then its whole traceback, the
    exception last: the first line now says which rank raised what (the frames follow it)."""
    from harness.run.launch.errors import exception_line

    tb = (
        'Traceback (most recent call last):\n  File "a.py", line 1, in f\n    g()\n'
        "RuntimeError: boom\nin phase forward of step 0, microbatch 0\n"
    )
    assert exception_line(tb) == "RuntimeError: boom in phase forward of step 0, microbatch 0"
    chained = (
        tb
        + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + 'Traceback (most recent call last):\n  File "b.py", line 2, in h\n    k()\nValueError: second\n'
    )
    assert exception_line(chained) == "ValueError: second"
    long = 'Traceback (most recent call last):\n  File "a.py", line 1, in f\nValueError: ' + "x" * 1000 + "\n"
    assert len(exception_line(long)) == 300 and exception_line(long).endswith("...")
    assert exception_line("") == ""
