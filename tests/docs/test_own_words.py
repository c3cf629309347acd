"""The project states the document's claims in its own words; it never copies its sentences.

The document ("FSDP2 Qwen3 Decoder Layer Walkthrough") is prose in Chinese around tables,
code and figures. The specs encode its figures and tables and cite it by title and section
heading; their ``says:`` texts, notes, comments and the code's docstrings state each claim in
English. This test fails when any line of the specs, the code, the tests, the benchmarks or
the README and docs/ (:data:`SCANNED`: so every ``says:``, note, comment, docstring and string literal)
shares a run of :data:`RUN` or more consecutive characters with a sentence of the document.

What counts as a sentence: every line of the document that holds a CJK ideograph, except
its section headings and the labels of its tables (column headings, row labels): those are
citations, kept as the document writes them (a spec's ``section:`` is one). Runs without an
ideograph (parameter names, shapes, code such as ``DTensor(Shard(0))``, formulas) are the
field's vocabulary, shared by the document and this project, and are not counted.

The document is not part of the repository. ``tests/data/walkthrough_prose.fingerprint``
holds, one per line, a 40-bit BLAKE2b hash of every :data:`RUN`-character window of its
sentences that holds an ideograph (the windows themselves are not stored). Regenerate it with
``python -m tests.docs.test_own_words PATH_TO_DOCUMENT``; when the document is at hand
(``$FSDP2_WALKTHROUGH_DOC``), a test checks the stored fingerprint against it.

Source: the document's headings and table layout; no torch import (fast).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import REPO
FINGERPRINT = REPO / "tests" / "data" / "walkthrough_prose.fingerprint"
RUN = 12  # characters: the shortest shared run that counts as a copy

IDEOGRAPH = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")

# The document's title and section headings, as it writes them: what a spec's `section:`
# cites. A test checks that every `section:` of the shipped specs is one of these.
HEADINGS = (
    "FSDP2 Qwen3 Decoder Layer Walkthrough",
    "简化的 Qwen3 结构",
    "配置（精简版，便于数值追踪）",
    "Decoder Layer 的结构",
    "参数列表（单层）",
    "FSDP2 设置",
    "初始状态（一层 forward 开始之前）",
    "每个 rank 上的参数分片",
    "每个 rank 上的激活值（输入）",
    "Forward 逐算子 Walkthrough",
    "Step 0：Pre-Forward Hook → All-Gather 层参数",
    "Step 1：input_layernorm(x)",
    "Step 2：Q / K / V 投影",
    "Step 3：Q-Norm / K-Norm（Qwen3 特有）",
    "Step 4：RoPE",
    "Step 5：Scaled Dot-Product Attention",
    "Step 6：o_proj",
    "Step 7：残差连接",
    "Step 8：post_attention_layernorm",
    "Step 9：MLP（SwiGLU）",
    "Step 10：残差连接",
    "Step 11：Post-Forward Hook → Reshard",
    "层间过渡",
    "Backward 简述",
    "单层单步通信量汇总",
    "关键要点",
    "相关页面",
)

# Files whose text must be the project's own: every spec, the code, the tests, the README.
SCANNED = ("README.md", "docs/*.md", "specs/**/*.yaml", "harness/**/*.py", "harness/**/*.json", "model/**/*.py",
           "tests/**/*.py", "benchmarks/**/*.py", "conftest.py")


def _window_hash(window: str) -> str:
    return hashlib.blake2b(window.encode("utf-8"), digest_size=5).hexdigest()


def document_parts(text: str) -> tuple[list[str], list[str]]:
    """Split the document into (sentences, labels).

    Labels are the headings (:data:`HEADINGS`) and the table labels: every cell of a table's
    first row (its column headings) and the first cell of each later row (its row label).
    Sentences are the other lines, or table cells, that hold an ideograph.
    """
    sentences: list[str] = []
    labels: list[str] = list(HEADINGS)
    in_table = False
    for line in text.splitlines():
        line = line.strip()
        if "\t" in line:
            cells = [c.strip() for c in line.split("\t")]
            if not in_table:  # a table's first row: its column headings
                labels.extend(c for c in cells if c)
            else:
                labels.append(cells[0])
                sentences.extend(c for c in cells[1:] if IDEOGRAPH.search(c))
            in_table = True
            continue
        in_table = False
        if line in HEADINGS or not IDEOGRAPH.search(line):
            continue
        sentences.append(line)
    return sentences, [label for label in labels if label]


def fingerprint(text: str) -> set[str]:
    """Hashes of every RUN-character window of the document's sentences that holds an ideograph."""
    sentences, _ = document_parts(text)
    return {_window_hash(s[i:i + RUN]) for s in sentences for i in range(len(s) - RUN + 1)
            if IDEOGRAPH.search(s[i:i + RUN])}


def _stored_fingerprint() -> frozenset[str]:
    return frozenset(FINGERPRINT.read_text(encoding="ascii").split())


def copied_runs(text: str, hashes: frozenset[str] | set[str]) -> list[str]:
    """The maximal runs of ``text`` (at least RUN characters) made of the document's sentence windows.

    Headings are masked first, so a heading cited inside a text never counts.
    """
    for heading in sorted(HEADINGS, key=len, reverse=True):
        text = text.replace(heading, "\0")
    hits: list[str] = []
    start = end = -1
    for i in range(len(text) - RUN + 1):
        window = text[i:i + RUN]
        if IDEOGRAPH.search(window) and _window_hash(window) in hashes:
            if i > end:  # a new run
                if end > start:
                    hits.append(text[start:end])
                start = i
            end = i + RUN
    if end > start:
        hits.append(text[start:end])
    return hits


def _scanned_files() -> list[Path]:
    files = {p for pattern in SCANNED for p in REPO.glob(pattern) if p.is_file()}
    return sorted(p for p in files if ".venv" not in p.parts)


def test_no_text_copies_a_sentence_of_the_document():
    hashes = _stored_fingerprint()
    copies = []
    for path in _scanned_files():
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for run in copied_runs(line, hashes):
                copies.append(f"{path.relative_to(REPO)}:{lineno}: {run!r}")
    assert not copies, ("these texts copy the document's sentences; state the claim in your own words "
                        "and cite the section heading:\n" + "\n".join(copies))


def test_sections_cite_the_documents_headings():
    """Every table's `section:` in the shipped specs is a heading of the document."""
    wrong = []
    for path in sorted((REPO / "specs").glob("*.yaml")):
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
        if "Walkthrough" not in str(spec.get("document", "")):
            continue
        for table in spec.get("tables", []):
            if table.get("section") not in HEADINGS:
                wrong.append(f"{path.name}: {table.get('section')!r}")
    assert not wrong, wrong


def test_the_check_finds_a_copied_sentence():
    """A copied sentence is found, inside English text too; headings, names and shapes are not.

    Run on a made-up document in the document's layout (a heading, a table, prose), so that
    this test itself copies nothing.
    """
    made_up = ("Step 0：Pre-Forward Hook → All-Gather 层参数\n\n"
               "名字\t形状说明文字很长很长\n"
               "self_attn.q_proj.weight\t这是一个虚构的表格单元格内容\n\n"
               "这是一个虚构的句子，用来检验 self_attn.q_proj.weight 的 [128, 512] 分片。\n")
    hashes = fingerprint(made_up)
    assert copied_runs('says: "虚构的句子，用来检验"', hashes) == []  # 10 characters: shorter than RUN
    assert copied_runs('says: "per the doc, 虚构的句子，用来检验 self_attn (Step 0)"', hashes) == \
        ["虚构的句子，用来检验 self_attn"]
    assert copied_runs("cell: 这是一个虚构的表格单元格内容", hashes) == ["这是一个虚构的表格单元格内容"]
    # headings and column headings as citations, parameter names, shapes and code are not copies
    assert copied_runs('section: "Step 0：Pre-Forward Hook → All-Gather 层参数"', hashes) == []
    assert copied_runs("形状说明文字很长很长: self_attn.q_proj.weight [128, 512]", hashes) == []
    # the stored fingerprint is the real document's
    assert len(_stored_fingerprint()) > 1000


@pytest.mark.skipif(not os.environ.get("FSDP2_WALKTHROUGH_DOC"), reason="the document is not in the repository; "
                    "set FSDP2_WALKTHROUGH_DOC to its path to check the stored fingerprint")
def test_fingerprint_matches_the_document():
    text = Path(os.environ["FSDP2_WALKTHROUGH_DOC"]).read_text(encoding="utf-8")
    lines = {line.strip() for line in text.splitlines()}
    assert [h for h in HEADINGS if h not in lines] == []
    stored = _stored_fingerprint()
    assert fingerprint(text) == set(stored)
    # every sentence of RUN characters or more, copied alone, is caught
    sentences, _ = document_parts(text)
    countable = [s for s in sentences if any(IDEOGRAPH.search(s[i:i + RUN]) for i in range(len(s) - RUN + 1))]
    missed = [s for s in countable if not copied_runs(s, stored)]
    assert missed == []


if __name__ == "__main__":  # python -m tests.docs.test_own_words PATH_TO_DOCUMENT
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.docs.test_own_words PATH_TO_DOCUMENT")
    hashes = fingerprint(Path(sys.argv[1]).read_text(encoding="utf-8"))
    FINGERPRINT.parent.mkdir(exist_ok=True)
    FINGERPRINT.write_text("".join(h + "\n" for h in sorted(hashes)), encoding="ascii")
    print(f"{FINGERPRINT.relative_to(REPO)}: {len(hashes)} windows")
