"""The README and the pages of docs/ hold together: every relative link reaches a file (and its
heading, for ``#anchor`` links), and every repository path named in them or in a docstring exists.

A page that moves, a heading that is renamed, a module that is split: each leaves a reference
behind that nobody follows until a newcomer does. The broken ones are listed, with the page and
line that hold them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support import REPO

PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
SOURCES = ("harness", "model", "tests", "benchmarks")

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
"""A Markdown link or image: ``[text](target)``; the target is group 1."""

REPO_PATH = re.compile(r"(?<![\w./<-])((?:harness|model|specs|scripts|benchmarks|tests|docs)/[\w./*<>{}-]*[\w/*>}])")
"""A repository path as the docs name one: ``harness/run/rank/step_plan.py``, ``specs/x.yaml``, ``scripts/bootstrap``,
a folder ``harness/run/launch/``. Not part of a longer path (``torch/distributed/...``)."""

PLACEHOLDER = re.compile(r"[*<>{}]|\.\.\.|X\.Y")
"""A pattern or a placeholder, not a path: ``specs/*.yaml``, ``tests/unit/<package>/``."""

EXAMPLE_PATHS = {"specs/x.yaml"}
"""Paths the docstrings name as an example of any spec's path, not as a file of this repository."""


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of the headings of a Markdown text (outside fenced code), duplicates numbered."""
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(page: Path, text: str) -> list[str]:
    """Each relative link of ``text`` (the content of ``page``) that reaches no file or heading,
    as ``page:line: target (why)``."""
    broken = []
    for number, line in enumerate(text.splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve()
            where = f"{page.relative_to(REPO)}:{number}: {target}"
            if path_part and not dest.exists():
                broken.append(f"{where} (no such file)")
                continue
            if not anchor or (path_part and dest.suffix != ".md"):
                continue
            if anchor not in anchors(dest.read_text(encoding="utf-8") if path_part else text):
                broken.append(f"{where} (no heading with anchor #{anchor})")
    return broken


def missing_paths(where: str, text: str, first_line: int = 1) -> list[str]:
    """Each repository path named in ``text`` that does not exist, as ``where:line: path``."""
    missing = []
    for number, line in enumerate(text.splitlines(), first_line):
        for path in REPO_PATH.findall(line):
            if PLACEHOLDER.search(path) or path in EXAMPLE_PATHS or (REPO / path).exists():
                continue
            missing.append(f"{where}:{number}: {path}")
    return missing


def docstrings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of the module's, classes' and functions' docstrings and of attribute docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                found.append((stmt.lineno, stmt.value.value))
    return found


def python_files() -> list[Path]:
    return sorted(p for top in SOURCES for p in (REPO / top).rglob("*.py") if ".venv" not in p.parts)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path):
    assert broken_links(page, page.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_a_page_names_exists(page: Path):
    assert missing_paths(str(page.relative_to(REPO)), page.read_text(encoding="utf-8")) == []


def test_every_path_a_docstring_names_exists():
    missing = []
    for path in python_files():
        for line, text in docstrings(path):
            missing += missing_paths(str(path.relative_to(REPO)), text, first_line=line)
    assert missing == []


def test_the_checks_can_fail(tmp_path: Path):
    """A broken link, a link to a missing heading and a path that is not there are each reported."""
    page = REPO / "docs" / "a_page.md"
    text = "\n".join(
        [
            "# A page",
            "[fine](../README.md#quickstart) [fine too](#a-page) [web](https://example.org/x)",
            "[gone](no-such-page.md)",
            "[no heading](../README.md#no-such-heading)",
            "`harness/no_such_module.py`, `specs/*.yaml`, `harness/load/docs.py`",
        ]
    )
    assert broken_links(page, text) == [
        "docs/a_page.md:3: no-such-page.md (no such file)",
        "docs/a_page.md:4: ../README.md#no-such-heading (no heading with anchor #no-such-heading)",
    ]
    assert missing_paths("docs/a_page.md", text) == ["docs/a_page.md:5: harness/no_such_module.py"]
    module = tmp_path / "m.py"
    module.write_text('"""See scripts/no_such_script."""\n\n\ndef f():\n    """Reads specs/qwen3_walkthrough.yaml."""\n')
    assert [missing_paths("m.py", text, line) for line, text in docstrings(module)] == [
        ["m.py:1: scripts/no_such_script"],
        [],
    ]


def test_anchors_follow_github():
    assert slug("A model's config.json") == "a-models-configjson"
    assert slug("On GPUs: what differs, and `scripts/gpu_check`") == "on-gpus-what-differs-and-scriptsgpu_check"
    assert anchors("# Setup\n```bash\n#SBATCH --nodes=2\n```\n## Setup\n") == {"setup", "setup-1"}
