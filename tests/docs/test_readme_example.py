"""The README's worked example is a spec that loads, with the entries its text walks through.

Its figures are checked by running it (README: the run's output is pasted there); this fast test
keeps the pasted YAML from drifting out of the spec language as the language changes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.load.spec import SpecError, load_spec
from tests.support import REPO

BEGIN, END = "<!-- worked-example -->", "<!-- /worked-example -->"


def example_yaml(readme: str) -> str:
    """The YAML between the worked-example markers of the README."""
    block = readme.split(BEGIN)[1].split(END)[0]
    return re.search(r"```yaml\n(.*?)```", block, re.S).group(1)


def test_the_worked_example_loads_with_the_entries_the_text_names(tmp_path: Path):
    path = tmp_path / "my_first_spec.yaml"
    path.write_text(example_yaml((REPO / "README.md").read_text(encoding="utf-8")), encoding="utf-8")
    spec = load_spec(path)
    assert [item.entry.id for item in spec.items] == ["first_two", "last_one", "gathered", "unsharded", "shards"]


def test_the_units_are_named_without_the_model_prefix(tmp_path: Path):
    """The README says ``unit: model.layers.0`` is a load error that lists the units."""
    text = example_yaml((REPO / "README.md").read_text(encoding="utf-8"))
    path = tmp_path / "my_first_spec.yaml"
    path.write_text(text.replace("with: {layer: 0, state:", "with: {unit: model.layers.0, state:"), encoding="utf-8")
    with pytest.raises(SpecError, match=r"no FSDP unit named 'model.layers.0'.*'layers.0', 'layers.1', 'root'"):
        load_spec(path)
