"""The torch range pyproject.toml declares holds the torch these tests run on: running the suite on
the oldest and newest declared releases (scripts/check_torch_release) is what checks the range."""

from __future__ import annotations

import re

from packaging.requirements import Requirement
from packaging.version import Version

from tests.support import REPO


def declared_torch() -> Requirement:
    text = (REPO / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
    requirements = [Requirement(r) for r in re.findall(r'"([^"]+)"', block)]
    return next(r for r in requirements if r.name == "torch")


def test_the_running_torch_is_in_the_declared_range():
    import torch

    torch_range = declared_torch().specifier
    release = Version(Version(torch.__version__).base_version)  # 2.11.0+cu130 -> 2.11.0
    assert torch_range.contains(release, prereleases=True), f"torch {torch.__version__} is outside {torch_range}"


def test_the_range_is_bounded_on_both_sides():
    """An open upper end would claim releases nobody checked."""
    operators = {s.operator for s in declared_torch().specifier}
    assert ">=" in operators and "<" in operators
