"""Two real runs of one setup on one torch: nothing differs but the one residue the README
names ("Reproducible observations": a peak snapshot that moves with gloo's worker thread), seen
by ``run --repeat`` and by ``compare`` of two ``--json`` files. The synthetic cases of both:
tests/unit/report/test_repeat.py and test_compare.py."""

from __future__ import annotations

import json
from pathlib import Path

from harness.cli import main
from harness.report.compare import compare_documents, read_documents
from harness.report.compare_text import format_report
from tests.support.specs import TINY_DIMS


def test_repeat_on_real_ranks_finds_nothing_varying(tmp_path: Path, capsys):
    """Two runs of a tiny 2-rank spec with every recorder on: no observed value differs."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(
        "spec: tiny\ntitle: t\ndocument: d\nsetup:\n  model: {overrides: {num_hidden_layers: 2, hidden_size: 64, "
        "intermediate_size: 128, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16}}\n"
        "  mesh: {shape: [2], dim_names: [dp]}\n"
        "tables:\n  - section: S\n    check: memory\n    entries:\n"
        "      - {layer: 0, state: After Pre-Forward, sharded_param: 74048}\n",
        encoding="utf-8",
    )
    status = main(["run", "--repeat", "2", str(spec)])
    out = capsys.readouterr().out
    assert status == 0, out
    lines = out.strip().splitlines()
    assert lines[0] == "tiny: 2 runs" and lines[-1] == "tiny: 1 passed, 0 failed, 0 unstable over 2 runs", out
    # timings, process ids and peak snapshots are declared to vary (harness/contract/fields.py): counted, not listed
    assert all(line.endswith("declared to vary run to run also differed") for line in lines[1:-1]), out


def test_two_runs_on_one_torch_compare_equal(tmp_path: Path, capsys):
    """Two real runs (gloo, 2 ranks, tiny layers, AdamW, every recorder on) through the CLI."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(
        "spec: tiny\ntitle: t\ndocument: d\nsetup:\n  model: {overrides: " + json.dumps(TINY_DIMS) + "}\n"
        "  mesh: {shape: [2], dim_names: [dp]}\n  optimizer: {name: adamw, lr: 0.01}\n"
        "tables:\n  - section: S\n    check: collectives\n    entries:\n"
        "      - {select: {op: all_gather}, count: 4}\n",
        encoding="utf-8",
    )
    for name in ("a", "b"):
        assert main(["run", str(spec), "--json", str(tmp_path / f"{name}.json")]) == 0
    capsys.readouterr()
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    differences = compare_documents(read_documents(a), read_documents(b))
    # Set apart: timings, process ids, and a peak snapshot that moves with gloo's worker thread
    # (harness/contract/fields.py); every behaviour value must be equal.
    behaviour = [d for d in differences if d.apart is None]
    assert not behaviour, "\n".join(format_report(differences))
    assert all(d.key.part == "memory" and "Peak" in str(d.key.selector) for d in differences if d.apart == "varies")
    assert main(["compare", a, b]) == 0, capsys.readouterr().out
