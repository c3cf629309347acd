"""The README's recipe for installing into another repository stays on the CPU build of torch.

No requirement can ask pip for torch's CPU build, and the package index's Linux torch is a CUDA build
of several GB. So the recipe installs ``torch==X+cpu`` first, as ``scripts/bootstrap`` does, and the
project after it; that holds only while X is the release bootstrap installs and one that
``pyproject.toml`` accepts (else pip would replace it), and while numpy is declared (else every run
warns ``Failed to initialize NumPy``).
"""

from __future__ import annotations

import re

from packaging.requirements import Requirement

from tests.support import REPO

BEGIN, END = "<!-- install-recipe -->", "<!-- /install-recipe -->"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_TORCH = re.compile(r'"?torch==([\w.]+)\+cpu"?')


def recipe(readme: str) -> list[str]:
    """The recipe's command lines: the README's text between the install-recipe markers."""
    start, end = readme.find(BEGIN), readme.find(END)
    assert 0 <= start < end, f"README.md lacks the markers {BEGIN} ... {END}"
    return [line.strip() for line in readme[start + len(BEGIN) : end].splitlines() if line.strip()]


def dependencies(pyproject: str) -> dict[str, Requirement]:
    """``[project] dependencies`` of a pyproject.toml text, by package name (tomllib is 3.11+)."""
    block = re.search(r"^dependencies = \[(.*?)^\]", pyproject, re.S | re.M).group(1)
    return {r.name: r for r in map(Requirement, re.findall(r'^\s*"([^"]+)"', block, re.M))}


def bootstrap_torch(bootstrap: str) -> str:
    """The torch release ``scripts/bootstrap`` installs by default (``TORCH_VERSION``)."""
    return re.search(r'TORCH_VERSION="\$\{TORCH_VERSION:-([\w.]+)\}"', bootstrap).group(1)


def problems(lines: list[str], declared: dict[str, Requirement], bootstrap_version: str) -> list[str]:
    """What makes the recipe pull a build other than bootstrap's CPU one, or leave numpy out."""
    found = []
    installs = [line for line in lines if re.search(r"\bpip install\b", line)]
    torch_at = next((i for i, line in enumerate(installs) if CPU_TORCH.search(line)), None)
    if torch_at is None:
        return [f"no line installs torch==...+cpu: {installs}"]
    project_at = next((i for i, line in enumerate(installs) if "torch" not in line), None)
    if project_at is None or project_at < torch_at:
        found.append("the project is installed before the CPU build of torch (pip would choose a CUDA build)")
    versions = set(CPU_TORCH.findall(installs[torch_at]))
    if versions != {bootstrap_version}:
        found.append(f"the recipe installs torch {sorted(versions)}, scripts/bootstrap {bootstrap_version}")
    for version in versions:
        if not declared["torch"].specifier.contains(version):
            found.append(f"torch {version} is outside pyproject's {declared['torch'].specifier} (pip would replace it)")
    if CPU_INDEX not in installs[torch_at]:
        found.append(f"the torch line has no fallback to PyTorch's CPU index {CPU_INDEX}")
    if "numpy" not in declared:
        found.append("pyproject.toml does not declare numpy (torch warns 'Failed to initialize NumPy')")
    return found


def shipped() -> tuple[list[str], dict[str, Requirement], str]:
    return (
        recipe((REPO / "README.md").read_text(encoding="utf-8")),
        dependencies((REPO / "pyproject.toml").read_text(encoding="utf-8")),
        bootstrap_torch((REPO / "scripts" / "bootstrap").read_text(encoding="utf-8")),
    )


def test_the_readme_recipe_installs_bootstraps_cpu_torch_first():
    assert problems(*shipped()) == []


def test_bootstrap_asks_for_the_cpu_build_from_the_same_index():
    bootstrap = (REPO / "scripts" / "bootstrap").read_text(encoding="utf-8")
    assert 'torch==${TORCH_VERSION}+cpu"' in bootstrap and CPU_INDEX in bootstrap


def test_a_wrong_recipe_is_caught():
    lines, declared, version = shipped()
    project_first = [lines[0], lines[2], lines[1], *lines[3:]]
    assert problems(project_first, declared, version) == [
        "the project is installed before the CPU build of torch (pip would choose a CUDA build)"
    ]
    cuda = [line.replace("+cpu", "").replace(CPU_INDEX, "https://download.pytorch.org/whl/cu130") for line in lines]
    assert problems(cuda, declared, version)[0].startswith("no line installs torch==...+cpu")
    newer = [line.replace(f"torch=={version}+cpu", "torch==2.99.0+cpu") for line in lines]
    assert problems(newer, declared, version) == [
        f"the recipe installs torch ['2.99.0'], scripts/bootstrap {version}",
        f"torch 2.99.0 is outside pyproject's {declared['torch'].specifier} (pip would replace it)",
    ]
    without_numpy = {name: r for name, r in declared.items() if name != "numpy"}
    assert problems(lines, without_numpy, version) == [
        "pyproject.toml does not declare numpy (torch warns 'Failed to initialize NumPy')"
    ]


def test_the_declared_range_admits_no_release_newer_than_the_newest_checked():
    """2.14.1 is the newest release the suite ran on (docs/torch-releases.md)."""
    torch = dependencies((REPO / "pyproject.toml").read_text(encoding="utf-8"))["torch"].specifier
    assert torch.contains("2.14.1") and torch.contains("2.13.0") and torch.contains("2.11.0")
    assert not torch.contains("2.14.2") and not torch.contains("2.15.0") and not torch.contains("2.12.0")
