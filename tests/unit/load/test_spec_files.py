"""harness/load/spec_files.py: which YAML files are specs (the pytest plugin and ``run DIR``),
so that a broken or empty spec is never dropped silently and an unrelated YAML never becomes an
error (issue 39, item 6)."""

from __future__ import annotations

import pytest

from harness.load.spec_files import expand, is_spec_file, looks_like_spec, spec_files

MISTYPED = b"spec: a\ntitle: t\ndocument: d\nsetup: {}\ntabels: []\n"


@pytest.mark.parametrize(
    "text, spec",
    [
        (MISTYPED, True),  # tables mistyped: still a spec (4 of its keys)
        (b"spec: a\ntables: []\n", True),
        (b"title: t\nsetup: {}\n", True),
        (b"apiVersion: v1\nkind: Deployment\nspec: {replicas: 2}\n", False),  # a Kubernetes manifest
        (b"name: ci\non: [push]\njobs: {}\n", False),  # a CI config
        (b"", False),
        (b"  spec: a\n  tables: []\n", False),  # not at the top level
        (b"spec: a\nspec: b\n", False),  # one key twice is one key
    ],
)
def test_two_of_a_specs_top_level_keys_make_a_spec(text, spec):
    assert looks_like_spec(text) is spec


def test_the_rule(tmp_path):
    (tmp_path / "specs" / "deep").mkdir(parents=True)
    (tmp_path / "given").mkdir()
    (tmp_path / "elsewhere").mkdir()
    files = {
        "specs/deep/empty.yaml": b"",  # below a folder named specs: every YAML file
        "given/ci.yml": b"name: ci\n",  # below a spec folder given by the user
        "elsewhere/named.yaml": b"",  # named itself
        "elsewhere/mistyped.yaml": MISTYPED,  # looks like a spec
        "elsewhere/ci.yaml": b"name: ci\non: [push]\n",  # none of these: not a spec
        "specs/notes.txt": b"spec: a\ntables: []\n",  # not YAML
    }
    for name, text in files.items():
        (tmp_path / name).write_bytes(text)
    named = [(tmp_path / "elsewhere/named.yaml").resolve()]
    folders = [(tmp_path / "given").resolve()]
    found = {name for name in files if is_spec_file(tmp_path / name, named, folders)}
    assert found == {"specs/deep/empty.yaml", "given/ci.yml", "elsewhere/named.yaml", "elsewhere/mistyped.yaml"}


def test_a_folder_stands_for_every_yaml_file_below_it_and_an_empty_one_for_itself(tmp_path):
    (tmp_path / "a" / "sub").mkdir(parents=True)
    (tmp_path / "a" / ".hidden").mkdir()
    (tmp_path / "none").mkdir()
    for name in ("a/z.yaml", "a/sub/b.yml", "a/hooks.py", "a/.hidden/c.yaml", "single.yaml"):
        (tmp_path / name).write_text("")
    assert spec_files(tmp_path / "a") == [tmp_path / "a/sub/b.yml", tmp_path / "a/z.yaml"]
    assert expand([tmp_path / "single.yaml", tmp_path / "a", tmp_path / "none"]) == [
        tmp_path / "single.yaml",
        tmp_path / "a/sub/b.yml",
        tmp_path / "a/z.yaml",
        tmp_path / "none",  # kept: loading it fails, naming the folder
    ]
