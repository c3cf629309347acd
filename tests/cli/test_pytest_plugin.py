"""The pytest plugin (harness/pytest_plugin/, installed as a pytest11 entry point): which files
it collects, and a spec that cannot run here skips, saying why."""

from __future__ import annotations

import os

import pytest

# torch is imported here, not in a test: pytester restores sys.modules after each test, dropping
# a torch imported inside one, and the next test's import of it then fails ("bad call flags")
import torch

from tests.support import REPO
from tests.support.specs import edit, line_of

pytest_plugins = ["pytester"]

NCCL_SPEC = """\
spec: needs_gpus
title: a spec for 4 GPUs
document: a document
backend: nccl
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 1}}
  mesh: {shape: [4], dim_names: [dp]}
tables:
  - section: "Forward"
    title: shapes
    check: step
    entries:
      - {id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}
      - {id: q_heads, step: step2.q_heads, shape: [2, 8, 8, 64]}
"""


def test_nccl_spec_without_enough_gpus_skips_with_the_reason(pytester, monkeypatch):
    if torch.cuda.device_count() >= 4:
        pytest.skip("this machine has 4 GPUs: the spec would run")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    pytester.mkdir("specs")
    (pytester.path / "specs" / "needs_gpus.yaml").write_text(NCCL_SPEC, encoding="utf-8")
    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*needs 4 GPUs for nccl (one per rank); * visible*"])


ONE_LAYER_FAKE = """\
spec: tiny_fake
title: one layer simulated on 2 ranks
document: a document
backend: fake
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 1}}
  mesh: {shape: [2], dim_names: [dp]}
  numerics: false       # the rows are shapes: no replica reference,
  track_memory: false   # no memory tracker
tables:
  - section: "Shards"
    check: param
    with: {layer: 0}
    columns: [param, local_shape]
    rows:
      - [self_attn.q_proj.weight, [256, 512]]
      - [self_attn.k_proj.weight, [128, 512]]
"""


@pytest.fixture
def in_repo_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


@pytest.mark.parametrize(
    "where, args",
    [
        ("my_checks/walkthrough_check.yaml", ["my_checks/walkthrough_check.yaml"]),  # a file, anywhere
        ("my_checks/walkthrough_check.yaml", ["my_checks"]),  # a folder not named specs
        (
            "elsewhere/deep/walkthrough_check.yml",
            ["--fsdp2-specs", "elsewhere", "-k", "q_proj or k_proj"],
        ),  # --fsdp2-specs
    ],
)
def test_specs_are_collected_wherever_they_are(pytester, in_repo_path, where, args):
    path = pytester.path / where
    path.parent.mkdir(parents=True)
    path.write_text(ONE_LAYER_FAKE, encoding="utf-8")
    if "--fsdp2-specs" not in args:  # in a spec folder every YAML file is a spec (test below)
        (path.parent / "other.yaml").write_text("name: not a spec\n")  # no spec keys: not collected
    result = pytester.runpytest_subprocess(
        *args, "-p", "no:cacheprovider", "-W", "error::pytest.PytestUnknownMarkWarning"
    )
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("*other.yaml*")
    result.stdout.no_fnmatch_line("*Unknown pytest.mark*")


def test_malformed_spec_is_one_failing_pytest_item(pytester, monkeypatch):
    """The installed plugin (entry point pytest11) collects the YAML files that are specs."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    bad_text = edit("check: param\n", "check: parm\n")
    pytester.mkdir("specs")
    bad = pytester.path / "specs" / "bad.yaml"
    bad.write_text(bad_text, encoding="utf-8")
    (pytester.path / "specs" / "notes.txt").write_text("not a spec")
    (pytester.path / "elsewhere.yaml").write_text("{not: a spec, no spec and tables keys}")  # not collected

    result = pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider")
    out = result.stdout.str()
    result.assert_outcomes(failed=1)  # and no errors: collection did not crash
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*collected 1 item*", "specs/bad.yaml::load FAILED*"])
    line = line_of(bad_text, "check: parm")
    assert f"spec does not load: {bad}:{line}: tables[1].check: did you mean 'param'? expected one of [" in out
    assert "Traceback" not in out and "elsewhere.yaml" not in out


OLD_NAMES = ("--specs", "--backend", "--run-timeout", "--no-preflight")


def test_options_carry_the_fsdp2_prefix_and_the_old_names_are_gone(pytester, in_repo_path, plugin_help):
    """Unprefixed names (``--backend``) would clash with another plugin's in a user's repository."""
    config = pytester.parseconfig(
        "--fsdp2-specs", "a", "--fsdp2-backend", "fake", "--fsdp2-run-timeout", "5", "--fsdp2-no-preflight"
    )
    assert [
        config.getoption(name)
        for name in ("--fsdp2-specs", "--fsdp2-backend", "--fsdp2-run-timeout", "--fsdp2-no-preflight")
    ] == [["a"], "fake", 5.0, True]
    for old in OLD_NAMES:
        with pytest.raises(pytest.UsageError, match="unrecognized arguments"):
            pytester.parseconfig(old, "x")
    # every option of the plugin's group, as --help lists them: all prefixed
    help_text = plugin_help
    group = help_text.split("FSDP2 conformance specs:\n", 1)[1].split("\n\n", 1)[0]
    options = [line.split()[0].split("=")[0] for line in group.splitlines() if line.startswith("  --")]
    assert options == [
        "--fsdp2-specs",
        "--fsdp2-backend",
        "--fsdp2-force-backend",
        "--fsdp2-run-timeout",
        "--fsdp2-no-preflight",
    ]
    assert not any(f"  {old}" in help_text for old in OLD_NAMES)


def test_a_spec_pinned_to_a_backend_keeps_it_under_fsdp2_backend(pytester, in_repo_path):
    """tiny_fake is pinned to fake: --fsdp2-backend nccl leaves it simulated (its items pass here, with a
    warning naming it); --fsdp2-force-backend sends it to nccl, which skips without the GPUs."""
    pytester.mkdir("specs")
    (pytester.path / "specs" / "tiny_fake.yaml").write_text(ONE_LAYER_FAKE, encoding="utf-8")
    kept = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fsdp2-backend", "nccl")
    kept.assert_outcomes(passed=2, warnings=1)
    kept.stdout.fnmatch_lines(
        [
            "*note: tiny_fake keeps its backend fake (pinned in the spec), not nccl; "
            "--fsdp2-force-backend runs it on nccl*"
        ]
    )
    if torch.cuda.device_count() >= 2:
        return
    forced = pytester.runpytest_subprocess(
        "-rs", "-p", "no:cacheprovider", "--fsdp2-backend", "nccl", "--fsdp2-force-backend"
    )
    forced.assert_outcomes(skipped=2)
    forced.stdout.fnmatch_lines(["*needs 2 GPUs for nccl (one per rank); * visible*"])
    assert "keeps its backend" not in forced.stdout.str()


CI_CONFIG = "name: ci\non: [push]\njobs: {}\n"
MANIFEST = "apiVersion: v1\nkind: Deployment\nspec: {replicas: 2}\n"


@pytest.mark.parametrize("folder, args", [("specs", []), ("checks", ["--fsdp2-specs", "checks"])])
def test_in_a_spec_folder_an_empty_or_mistyped_yaml_is_one_failing_item(pytester, in_repo_path, folder, args):
    """A spec folder (named specs, or given to --fsdp2-specs): every YAML file gives items or one
    load error naming the file, line and key (issue 39, item 6)."""
    (pytester.path / folder / "deep").mkdir(parents=True)
    (pytester.path / folder / "empty.yaml").write_text("")
    mistyped = ONE_LAYER_FAKE.replace("tables:", "tabels:")
    (pytester.path / folder / "deep" / "mistyped.yaml").write_text(mistyped, encoding="utf-8")
    (pytester.path / folder / "good.yaml").write_text(ONE_LAYER_FAKE, encoding="utf-8")
    (pytester.path / "ci.yaml").write_text(CI_CONFIG)  # outside: not a spec
    result = pytester.runpytest_subprocess(*args, "-p", "no:cacheprovider", "-rf")
    result.assert_outcomes(passed=2, failed=2)
    line = line_of(mistyped, "tabels:")
    result.stdout.fnmatch_lines_random(
        [
            f"*{folder}/empty.yaml:1: expected a mapping with keys spec, title, document, setup, tables, "
            "got an empty file*",
            f"*{folder}/deep/mistyped.yaml:{line}: tabels: Additional properties are not allowed*",
        ]
    )
    result.stdout.no_fnmatch_line("*ci.yaml*")


def test_elsewhere_a_mistyped_spec_fails_and_an_unrelated_yaml_is_left_alone(pytester, in_repo_path):
    """Outside spec folders a YAML file with two of a spec's top-level keys is a spec; a CI config
    or a Kubernetes manifest (spec: alone) is not."""
    (pytester.path / "checks").mkdir()
    mistyped = ONE_LAYER_FAKE.replace("tables:", "tabels:")
    (pytester.path / "checks" / "mistyped.yaml").write_text(mistyped, encoding="utf-8")
    (pytester.path / "checks" / "ci.yaml").write_text(CI_CONFIG)
    (pytester.path / "checks" / "deploy.yaml").write_text(MANIFEST)
    (pytester.path / "checks" / "empty.yaml").write_text("")
    result = pytester.runpytest_subprocess("checks", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["FAILED checks/mistyped.yaml::load*"])
    for other in ("ci.yaml", "deploy.yaml", "empty.yaml"):
        result.stdout.no_fnmatch_line(f"*{other}*")
