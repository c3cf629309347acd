"""Bandwidth in nccl-tests' terms: the formulas, the check kind, the table, the load errors, and
the shipped ``specs/cluster_bandwidth.yaml`` on real gloo ranks with its busbw figures held
against the formula applied to the recorded times."""

from __future__ import annotations

import pytest

from harness.judge.checks import check
from harness.language.algbw_busbw import bandwidth_rows, bus_factor
from harness.language.entry import make_entry
from harness.load.spec import SpecError, load_spec
from harness.report.bandwidth_table import markdown_table, table_lines
from tests.support.observations import timed_observation


def test_bus_factors_are_nccl_tests():
    assert bus_factor("all_gather", 4) == 0.75 and bus_factor("reduce_scatter", 8) == 7 / 8
    assert bus_factor("all_reduce", 4) == 1.5
    with pytest.raises(ValueError, match="no nccl-tests bus factor for op 'broadcast'"):
        bus_factor("broadcast", 4)


def test_rows_apply_the_formula_to_the_mean_time_over_ranks():
    rows = {(r.op, r.name): r for r in bandwidth_rows(timed_observation())}
    ag = rows["all_gather", "layer"]
    mean_s = (0.010 + 0.012 + 0.011 + 0.013) / 4  # 11.5 ms
    assert ag.time_us == pytest.approx(mean_s * 1e6)
    assert ag.algbw == pytest.approx(4_720_896 / mean_s / 1e9)  # 0.4105 GB/s
    assert ag.busbw == pytest.approx(4_720_896 / mean_s / 1e9 * 3 / 4)
    assert rows["all_reduce", "small"].busbw == pytest.approx(2_000_000 / 0.001 / 1e9 * 2 * 3 / 4)  # 3.0 GB/s
    assert ag.times_us[3] == pytest.approx(13_000)


def run(obs, **values):
    return check(make_entry("bandwidth", values, id="bw", section="nccl-tests"), obs)


def test_a_minimum_busbw_holds_and_fails():
    obs = timed_observation()  # all-gather busbw = 4,720,896 / 0.0115 s x 3/4 = 0.307885 GB/s
    assert run(obs, op="all_gather", size="layer", busbw=">= 0.3").status == "pass"
    failed = run(obs, op="all_gather", size="layer", busbw=">= 0.31")
    assert failed.status == "fail"
    assert "expected >= 0.31; observed 0.307885 (ranks 0-3)" in failed.explain()


def test_the_least_busbw_of_the_selected_rows_is_the_one_held():
    obs = timed_observation()  # reduce-scatter takes twice as long: busbw 0.1539 GB/s
    assert run(obs, size="layer", busbw=">= 0.3").status == "fail"
    assert run(obs, size="layer", rows=2, busbw=">= 0.15").status == "pass"


def test_wrong_elements_fail_naming_the_rank_and_its_host():
    result = run(timed_observation(wrong_rank=2), op="all_gather", size="layer", wrong=0)
    assert result.status == "fail"
    assert "failing ranks: 2 (host node-b)" in result.explain()


def test_an_unknown_row_is_an_error_listing_the_timed_ones():
    result = run(timed_observation(), op="all_reduce", size="layer", wrong=0)
    assert result.status == "error"
    assert "timed: ['all_gather layer', 'all_reduce small', 'reduce_scatter layer']" in result.message


def test_a_simulated_run_skips():
    obs = timed_observation()
    obs["environment"]["simulated"] = True
    assert run(obs, op="all_gather", busbw="> 0").status == "skip"


def test_the_table_has_nccl_tests_columns():
    lines = table_lines(bandwidth_rows(timed_observation()), world_size=4)
    header = lines[2].split()
    assert header[:10] == ["#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"]
    first = lines[4].split()
    assert first[:9] == ["4720896", "2360448", "bfloat16", "none", "-1", "11500.0", "0.41", "0.31", "0"]
    assert lines[5].split()[3] == "sum"
    assert markdown_table(bandwidth_rows(timed_observation()))[0].startswith(
        "| size (B) | count (elements) | type | redop"
    )


SPEC = """\
spec: bw
title: bandwidth
document: nccl-tests
setup:
  mesh: {shape: [4]}
  bandwidth:
    sizes:
      - {name: layer, layer_of: walkthrough}
tables:
  - section: s
    check: bandwidth
    entries:
      - ENTRY
"""


@pytest.mark.parametrize(
    "setup_or_entry, key_path, message",
    [
        (
            "{op: all_gather, size: layr, wrong: 0}",
            "tables[0].entries[0].size",
            "no size named 'layr'; setup.bandwidth times ['layer', 'step']",
        ),
        (
            "{op: allgather, size: layer, wrong: 0}",
            "tables[0].entries[0].op",
            "expected one of ['all_gather', 'reduce_scatter', 'all_reduce']",
        ),
        ("{op: all_gather, busbw: fast}", "tables[0].entries[0]", "busbw: expected a number"),
        (
            "layer_of: walkthrough}\n      - {name: layer, numel: 10}",
            "setup.bandwidth.sizes[1].name",
            "size name 'layer' is used by sizes[0]",
        ),
        ("layer_of: Qwen3-9B}", "setup.bandwidth.sizes[0].layer_of", "expected a known config"),
    ],
)
def test_load_errors_name_file_line_and_key(tmp_path, setup_or_entry, key_path, message):
    text = (
        SPEC.replace("ENTRY", setup_or_entry)
        if setup_or_entry.startswith("{")
        else SPEC.replace("layer_of: walkthrough}", setup_or_entry).replace("ENTRY", "{op: all_gather, wrong: 0}")
    )
    path = tmp_path / "bw.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.key_path == key_path, str(info.value)
    assert message in info.value.message
    assert str(info.value).startswith(f"{path}:{info.value.line}: {key_path}: ")


def test_bandwidth_entries_need_setup_bandwidth(tmp_path):
    path = tmp_path / "bw.yaml"
    path.write_text(
        SPEC.replace("  bandwidth:\n    sizes:\n      - {name: layer, layer_of: walkthrough}\n", "").replace(
            "ENTRY", "{op: all_gather, wrong: 0}"
        ),
        encoding="utf-8",
    )
    with pytest.raises(SpecError, match=r"bw.yaml:10: tables\[0\].entries\[0\]: setup.bandwidth is not set"):
        load_spec(path)


def test_unit_sizes_are_the_layers_fsdp_gathers():
    from harness.run.rank.collective_timing import unit_numel

    assert unit_numel("walkthrough", 4) == 2_360_448
    assert unit_numel("Qwen3-8B", 4) == 192_946_432
    assert unit_numel("Qwen3-32B", 4) == 487_598_336
    assert unit_numel("Qwen3-32B", 1024) == 487_600_128  # q_norm/k_norm and the layernorms padded


def test_wrong_counts_elements_that_differ():
    import torch

    from harness.run.rank.collective_timing import PlannedRow, _pattern, _wrong

    row = PlannedRow("x", "sweep", "all_gather", torch.bfloat16, 12, 12, 3, None, None)
    out = torch.cat([_pattern(4, j, torch.bfloat16, torch.device("cpu")) for j in range(3)])
    assert _wrong(row, out, 0, torch.device("cpu")) == 0
    out[5] += 1
    out[11] = float("nan")
    assert _wrong(row, out, 0, torch.device("cpu")) == 2
    rs = PlannedRow("x", "sweep", "reduce_scatter", torch.bfloat16, 12, 12, 3, None, None)
    index = torch.arange(4, 8)
    expected = sum(((index + j) % 3 - 1) for j in range(3)).to(torch.bfloat16)  # rank 1's chunk of the sum
    assert _wrong(rs, expected, 1, torch.device("cpu")) == 0
    assert _wrong(rs, expected + 1, 1, torch.device("cpu")) == 4
