"""The walkthrough document's tables as it prints them, and finding each figure in render's Markdown.

The expected figures below were typed from the document (*FSDP2 Qwen3 Decoder Layer
Walkthrough*, shared/seed/000_1871bbf14bb2dbe8.txt), table by table, as it prints them
(its own abbreviations, rounding and thousands separators), never derived from a run or
from the harness. Each expected row must be found on a row of the regenerated Markdown
table under the heading that cites the same document section, and every rank's variant of
that table must hold it.
"""

from __future__ import annotations

# section -> rows; a row is (key of its first cell, figures that must appear on that row).
# A key matches a first cell equal to it, or ending in "." + key (the document abbreviates
# self_attn.q_proj.weight as q_proj.weight); "a | b" also matches the second cell's start.
DOCUMENT_TABLES: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "配置（精简版，便于数值追踪）": [
        ("hidden_size", ("512",)),
        ("num_attention_heads", ("8",)),
        ("num_key_value_heads", ("4", "GQA 2:1")),
        ("head_dim", ("64",)),
        ("intermediate_size", ("1024",)),
        ("DP world size", ("4",)),
        ("batch per rank", ("2",)),
        ("sequence length", ("8",)),
    ],
    "参数列表（单层）": [
        ("input_layernorm.weight", ("[512]", "512")),
        ("self_attn.q_proj.weight", ("[512, 512]", "262,144")),
        ("self_attn.k_proj.weight", ("[256, 512]", "131,072")),
        ("self_attn.v_proj.weight", ("[256, 512]", "131,072")),
        ("self_attn.q_norm.weight", ("[64]", "64")),
        ("self_attn.k_norm.weight", ("[64]", "64")),
        ("self_attn.o_proj.weight", ("[512, 512]", "262,144")),
        ("post_attention_layernorm.weight", ("[512]", "512")),
        ("mlp.gate_proj.weight", ("[1024, 512]", "524,288")),
        ("mlp.up_proj.weight", ("[1024, 512]", "524,288")),
        ("mlp.down_proj.weight", ("[512, 1024]", "524,288")),
        ("**layer total (11 parameters)**", ("≈2.36M",)),
    ],
    "每个 rank 上的参数分片": [
        ("input_layernorm.weight", ("[512]", "[128]", "128")),
        ("q_proj.weight", ("[512, 512]", "[128, 512]", "65,536")),
        ("k_proj.weight", ("[256, 512]", "[64, 512]", "32,768")),
        ("v_proj.weight", ("[256, 512]", "[64, 512]", "32,768")),
        ("q_norm.weight", ("[64]", "[16]", "16")),
        ("k_norm.weight", ("[64]", "[16]", "16")),
        ("o_proj.weight", ("[512, 512]", "[128, 512]", "65,536")),
        ("post_attention_layernorm.weight", ("[512]", "[128]", "128")),
        ("gate_proj.weight", ("[1024, 512]", "[256, 512]", "131,072")),
        ("up_proj.weight", ("[1024, 512]", "[256, 512]", "131,072")),
        ("down_proj.weight", ("[512, 1024]", "[128, 1024]", "131,072")),
        ("**total per rank**", ("≈590K",)),
    ],
    "每个 rank 上的激活值（输入）": [
        ("0", ("[2, 8, 512]", "0, 1")),
        ("1", ("[2, 8, 512]", "2, 3")),
        ("2", ("[2, 8, 512]", "4, 5")),
        ("3", ("[2, 8, 512]", "6, 7")),
    ],
    # Steps 0-11: the shapes each step's text gives, and its communication.
    "Forward 逐算子 Walkthrough": [
        ("0", ("11 parameters", "full plain tensors", "4.72 MB", "[2, 8, 512]", "all_gather", "3.54 MB")),
        ("1", ("[2, 8, 512]", "none")),
        ("2", ("q [2, 8, 512]", "k [2, 8, 256]", "v [2, 8, 256]", "[2, 8, 8, 64]", "[2, 8, 4, 64]", "none")),
        ("3", ("[2, 8, 8, 64]", "[2, 8, 4, 64]", "none")),
        ("4", ("none",)),
        ("5", ("[2, 8, 8, 64]", "[2, 8, 512]", "none")),
        ("6", ("[2, 8, 512]", "none")),
        ("7", ("[2, 8, 512]", "none")),
        ("8", ("[2, 8, 512]", "none")),
        ("9", ("[2, 8, 1024]", "[2, 8, 512]", "none")),
        ("10", ("[2, 8, 512]", "none")),
        ("11", ("11 parameters", "Shard(dim=0)", "1.18 MB", "none")),
    ],
    "Backward 简述": [
        ("0", ("all-gather", "all_gather", "3.54 MB")),
        ("1–10", ("none",)),
        ("11", ("reduce-scatter", "reduce_scatter", "3.54 MB")),
        ("optimizer", ("none",)),
    ],
    "单层单步通信量汇总": [
        ("forward | all-gather", ("3/4 × 4.72 MB", "3.54 MB")),
        ("backward | all-gather", ("3.54 MB",)),
        ("backward | reduce-scatter", ("3.54 MB",)),
        ("**one layer, one step**", ("10.6 MB",)),
    ],
}


# Figures the document states in the text under a table (4.72 MB per layer in fp16, ...).
DOCUMENT_LINES: dict[str, tuple[str, ...]] = {
    "参数列表（单层）": ("4.72 MB",),
    "每个 rank 上的参数分片": ("Shard(dim=0)", "1.18 MB", "1/4"),
    "每个 rank 上的激活值（输入）": ("Global batch 8",),
    "Forward 逐算子 Walkthrough": ("4.72 MB", "1.18 MB"),
    "层间过渡": ("none",),
    "单层单步通信量汇总": ("2 × 10.6 MB",),
}


def sections(markdown: str) -> dict[str, list[str]]:
    """Document section cited by '## ' headings -> the lines under them (every heading citing it:
    a table per unit, or per group of units observed the same). A heading cites one section at
    most; one that cites none (mixed precision, memory) is not the document's."""
    out: dict[str, list[str]] = {}
    for block in markdown.split("\n## ")[1:]:
        lines = block.splitlines()
        cited = [ln.removeprefix("Document section: ") for ln in lines if ln.startswith("Document section: ")]
        assert len(cited) <= 1, f"heading {lines[0]!r} cites {cited}"
        if cited:
            out.setdefault(cited[0], []).extend(lines)
    return out


def table_rows(lines: list[str]) -> list[list[str]]:
    return [
        [c.strip() for c in ln.strip().strip("|").split("|")]
        for ln in lines
        if ln.startswith("|") and not ln.startswith("|---")
    ]


def _row_matches(row: list[str], key: str) -> bool:
    """``key`` is the first cell (or its dotted tail); "a | b" also needs the second cell to
    start with b (two rows of the summary both start with 'backward')."""
    first, *rest = key.split(" | ")
    if not (row[0] == first or row[0].endswith("." + first)):
        return False
    return all(len(row) > i + 1 and row[i + 1].startswith(part) for i, part in enumerate(rest))


def missing_figures(markdown: str) -> list[str]:
    """Every document figure not found where it belongs, as 'section: row: figure'."""
    found = sections(markdown)
    problems = []
    for section, rows in DOCUMENT_TABLES.items():
        if section not in found:
            problems.append(f"{section}: no such section")
            continue
        body = table_rows(found[section])
        for key, figures in rows:
            matching = [r for r in body if _row_matches(r, key)]
            if not matching:
                problems.append(f"{section}: no row {key!r}")
            for row in matching:
                text = " | ".join(row)
                problems += [f"{section}: row {key!r}: {fig!r} not in {text!r}" for fig in figures if fig not in text]
    for section, figures in DOCUMENT_LINES.items():
        text = "\n".join(found.get(section, []))
        problems += [f"{section}: {fig!r} not found" for fig in figures if fig not in text]
    return problems
