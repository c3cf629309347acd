"""The terminal report at ordinary widths: ids and field names never broken, a table that does not
fit printed entry by entry, a failure pointing at its field's line, hosts named as hosts."""

from __future__ import annotations

import io

import pytest
from rich.cells import cell_len
from rich.console import Console

from harness.judge.evaluate import FAILING, evaluate_spec
from harness.load.spec import load_spec
from harness.report.terminal import print_report
from tests.support import WALKTHROUGH
from tests.support.observations import walkthrough_observation
from tests.support.specs import edit, line_of
from tests.support.specs import write_spec as write


def _report(results, width: int, **kwargs) -> str:
    out = io.StringIO()
    print_report(results, Console(file=out, width=width, color_system=None, soft_wrap=True), **kwargs)
    return out.getvalue()


@pytest.fixture(scope="module")
def walkthrough_results():
    return evaluate_spec(load_spec(WALKTHROUGH), walkthrough_observation())


@pytest.mark.parametrize("width", [80, 100, 120])
def test_no_id_or_field_name_is_broken(walkthrough_results, width):
    """At 80 columns the report once broke `hidden_size_batc│h_seq`, `group_s│ize`; at 100, `buffer_byt│es`."""
    text = _report(walkthrough_results, width)
    names = {r.entry.id for r in walkthrough_results} | {f.field for r in walkthrough_results for f in r.fields}
    assert sorted(n for n in names if n not in text) == []
    assert max(cell_len(line) for line in text.splitlines()) <= width


def test_at_80_columns_the_report_stays_about_as_long_as_a_wide_one(walkthrough_results):
    """It grew to 550 lines at 80 columns, against 370 at 160: tables that do not fit go entry by entry."""
    narrow, wide = _report(walkthrough_results, 80), _report(walkthrough_results, 160)
    assert len(narrow.splitlines()) <= 1.15 * len(wide.splitlines())
    assert "✓ self_attn.q_proj.weight\n" in narrow  # an entry of the parameter table, on its own line
    assert "\n  ✓ numel: expected 262,144; observed 262,144 (ranks 0-3)\n" in narrow


def test_entry_by_entry_wraps_values_at_spaces():
    failing = evaluate_spec(load_spec(WALKTHROUGH), _wrong_layer_bytes())
    text = _report([r for r in failing if r.status in FAILING], 40, only_failures=True)
    lines = text.splitlines()
    assert all(cell_len(line) <= 40 or " " not in line.strip() for line in lines), text
    assert "\n  ✗ numel: expected 512;" in text and "\n  FAIL numel: expected 512;" in text


def _wrong_layer_bytes():
    obs = walkthrough_observation()
    for rank in obs["ranks"]:
        for p in rank["params"]:
            if p["fqn"] == "layers.0.input_layernorm.weight":
                p["numel"] += 1
    return obs


BLOCK = edit(
    '      - id: layer_bytes\n        layer: 0\n        bytes: "4.72 MB"\n',
    '      - id: layer_bytes\n        layer: 0\n        numel: 2360448\n        bytes: "4.73 MB"\n',
)


def test_a_failure_points_at_its_fields_line(tmp_path):
    """The line was the entry's first (``- id: layer_bytes``), not the failing field's."""
    path = write(tmp_path, BLOCK)
    (result,) = [r for r in evaluate_spec(load_spec(path), walkthrough_observation()) if r.status in FAILING]
    assert result.explain().startswith(f"{path}:{line_of(BLOCK, 'bytes: ')}: [Totals] layer_bytes")
    assert line_of(BLOCK, "bytes: ") != line_of(BLOCK, "id: layer_bytes")


def test_a_field_of_with_is_blamed_where_it_is_written(tmp_path):
    text = edit("    columns: [param, local_shape, local_numel]\n", "    columns: [param, local_shape]\n")
    text = text.replace("    with: {layer: 0}\n", "    with: {layer: 0, local_numel: 65537}\n")
    text = text.replace("[128, 512], 65536]", "[128, 512]]").replace("[64, 512], 32768]", "[64, 512]]")
    path = write(tmp_path, text)
    failing = [r for r in evaluate_spec(load_spec(path), walkthrough_observation()) if r.status in FAILING]
    assert failing and all(r.explain().startswith(f"{path}:{line_of(text, 'with: {')}:") for r in failing)


def test_failing_ranks_name_the_host_as_a_host():
    from harness.language.observed import ranks_on_hosts

    assert ranks_on_hosts([0, 1, 2, 3, 4, 5], dict.fromkeys(range(6), "vm")) == "0-5 (host vm)"
