"""Tests of harness/language/expect.py: how a figure written as the document prints it holds a value."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from harness.language.expect import UNIT_SCALE, Expectation, ExpectationError, parse_expectation, show

# The document's own figures and what they must hold (observed values of the walkthrough setup).
LAYER_BYTES = 4_720_896  # 2,360,448 fp16 elements
LAYER_NUMEL = 2_360_448
LOCAL_NUMEL = 590_112
RING_BYTES = LAYER_BYTES * 3 // 4  # 3,540,672: (N-1)/N x 4.72 MB


@pytest.mark.parametrize(
    "figure, holds, misses",
    [
        ("4.72 MB", [LAYER_BYTES, 4_715_000, 4_725_000], [4_726_000, 4_714_000, 4_720_896_000]),
        ("1.18 MB", [1_180_224], [1_190_000, 1_170_000]),
        ("3.54 MB", [RING_BYTES], [3_546_000]),
        ("≈590K", [LOCAL_NUMEL, 589_500, 590_500], [590_600, 589_000, LAYER_NUMEL]),
        ("≈2.36M", [LAYER_NUMEL], [2_366_000, 2_354_000]),
        ("~10.6 MB", [3 * RING_BYTES], [10_700_000, 10_540_000]),
        ("2 × 10.6 MB", [6 * RING_BYTES, 21_100_000, 21_300_000], [21_000_000, 21_400_000, 10_600_000]),
        ("2 x 2.36M", [2 * LAYER_NUMEL], [LAYER_NUMEL]),
        ("2*10.6MB", [6 * RING_BYTES], [3 * RING_BYTES]),
        ("≈ 4.72 MB", [LAYER_BYTES], [4_726_000]),
        ("1 KiB", [1024, 1000, 1535], [511, 1537, 2048]),  # KiB: powers of 2
        ("1.5 GiB", [int(1.5 * 2**30)], [int(1.6 * 2**30)]),
        ("4.7 MB", [LAYER_BYTES], [4_800_000]),  # one digit fewer: a coarser figure still holds
    ],
)
def test_rounded_figure_holds_half_a_printed_unit(figure, holds, misses):
    e = parse_expectation(figure)
    assert e.form == "rounded"
    for value in holds:
        assert e.holds(value), f"{figure} should hold {value:,}"
        assert e.holds(float(value)), f"{figure} should hold {float(value)}"
    for value in misses:
        assert not e.holds(value), f"{figure} should not hold {value:,}"


@pytest.mark.parametrize(
    "figure, value, tolerance, unit",
    [
        ("4.72 MB", 4.72e6, 5e3, "MB"),
        ("≈590K", 590e3, 500, "K"),
        ("~10.6 MB", 10.6e6, 5e4, "MB"),
        ("2 × 10.6 MB", 21.2e6, 1e5, "MB"),  # the tolerance is multiplied too
        ("≈2.36M", 2.36e6, 5e3, "M"),
        ("≈3", 3, 0.5, ""),  # an approximate figure without a unit
        ("12 B", 12, 0.5, "B"),
    ],
)
def test_rounded_figure_value_and_tolerance(figure, value, tolerance, unit):
    e = parse_expectation(figure)
    assert (e.form, e.unit) == ("rounded", unit)
    assert e.value == pytest.approx(value)
    assert e.tolerance == pytest.approx(tolerance)


def test_rounded_figure_describes_itself_and_shows_observed_in_its_units():
    e = parse_expectation("4.72 MB")
    assert e.describe() == "4.72 MB (= 4.72 MB ± 0.005 MB)"
    assert e.show_observed(LAYER_BYTES) == "4,720,896 B = 4.721 MB"
    assert parse_expectation("≈590K").show_observed(LOCAL_NUMEL) == "590,112 = 590.1 K"


@pytest.mark.parametrize(
    "raw, value",
    [
        (590112, 590112),
        ("2,360,448", 2360448),
        ("590112", 590112),
        ("0", 0),
        (" 1,024 ", 1024),
    ],
)
def test_ints_are_exact(raw, value):
    e = parse_expectation(raw)
    assert (e.form, e.value) == ("exact", value)
    assert e.holds(value) and e.holds(float(value))
    assert not e.holds(value + 1)
    assert e.describe() == show(value)


@pytest.mark.parametrize(
    "raw, equal, different",
    [
        ("float16", "float16", "bfloat16"),
        ("FSDP::all_gather", "FSDP::all_gather", "FSDP::all_gather "),
        ("Shard(dim=0)", "Shard(dim=0)", "Shard(dim=1)"),
        ("all_gather layers.0", "all_gather layers.0", "all_gather layers.1"),
        ("dp", "dp", "DP"),
        ("", "", None),
        (None, None, 0),
        (True, True, False),
        ([2, 8, 512], [2, 8, 512], [2, 8, 256]),
        ([2, 8, 512], (2, 8, 512), [[2, 8, 512], [2, 8, 512]]),
        (["Shard(dim=0)"], ("Shard(dim=0)",), ["Replicate()"]),
    ],
)
def test_non_numeric_values_stay_exact(raw, equal, different):
    e = parse_expectation(raw)
    assert e.form == "exact"
    assert e.holds(equal)
    assert not e.holds(different)


def test_numeric_expectations_never_hold_non_numbers():
    for raw in ("4.72 MB", "<= 1e-3", ">= 1"):
        e = parse_expectation(raw)
        for observed in (None, "4.72 MB", [LAYER_BYTES], True, False):
            assert not e.holds(observed), (raw, observed)


@pytest.mark.parametrize(
    "raw, holds, misses",
    [
        ("<= 1e-3", [0.0, 1e-3, 5e-4], [1.01e-3, 1.0]),
        ("< 0.01", [0.0, 0.00999], [0.01, 0.02]),
        (">= 1", [1, 2.5, 10**9], [0.999, 0]),
        ("> 0", [1e-12, 3], [0, -1]),
        ("== 0", [0, 0.0], [1e-12, 1]),
        ("<= 1,000", [1000], [1001]),
        ("<=-1e-3", [-1, -1e-3], [0]),
    ],
)
def test_bounds(raw, holds, misses):
    e = parse_expectation(raw)
    assert e.form == "bound"
    assert e.describe().startswith(raw.lstrip()[:2].strip())
    for value in holds:
        assert e.holds(value), (raw, value)
    for value in misses:
        assert not e.holds(value), (raw, value)


@pytest.mark.parametrize(
    "raw",
    [
        "4.7.2 MB",
        "≈ MB",
        "≈",
        "~",
        "4.72 XB",
        "4.72 mb",
        "1e-3",
        "<= ",
        "<= 1e",
        ">= one",
        "== 1.2.3",
        "2 × MB",
        "2 × ≈10.6 MB",
        "4,72.5.1 K",
        "12 apples",
    ],
)
def test_malformed_figures_raise(raw):
    with pytest.raises(ExpectationError, match="cannot read") as info:
        parse_expectation(raw)
    assert repr(raw) in str(info.value)
    assert isinstance(info.value, ValueError)  # spec loading reports it as a SpecError


@pytest.mark.parametrize("raw", ["Shard(dim=0)", "After Pre-Forward", "layers.0", "-", "FSDP::all_gather"])
def test_strings_that_are_not_figures_do_not_raise(raw):
    assert parse_expectation(raw).form == "exact"


# --- property: a printed figure holds its own value and not one printed unit away --------

UNITS = [u for u in UNIT_SCALE if u]


@st.composite
def printed_figures(draw):
    """(figure text, value it prints, one printed unit in base units)."""
    unit = draw(st.sampled_from(UNITS))
    decimals = draw(st.integers(0, 3))
    digits = draw(st.integers(1, 10**6))
    approx = draw(st.sampled_from(["", "≈", "~"]))
    mult = draw(st.sampled_from([1, 1, 2, 3, 64]))
    number = f"{digits / 10**decimals:.{decimals}f}"
    figure = f"{approx}{f'{mult} × ' if mult > 1 else ''}{number} {unit}"
    step = 10.0**-decimals * UNIT_SCALE[unit] * mult
    return figure, digits * step, step


@given(printed_figures())
@example(("4.72 MB", 4.72e6, 1e4))
@example(("≈590K", 590e3, 1e3))
@example(("2 × 10.6 MB", 21.2e6, 2e5))
def test_printed_figure_holds_itself_not_its_neighbours(case):
    figure, value, step = case
    e = parse_expectation(figure)
    assert e.form == "rounded"
    assert e.holds(value)
    assert e.holds(value + 0.49 * step) and e.holds(value - 0.49 * step)
    assert not e.holds(value + step) and not e.holds(value - step)
    assert not e.holds(value + 0.51 * step) and not e.holds(value - 0.51 * step)


@given(st.integers(0, 10**12))
def test_an_int_printed_with_commas_is_exact(n):
    e = parse_expectation(f"{n:,}")
    assert e == Expectation(f"{n:,}", "exact", n)
    assert e.holds(n) and not e.holds(n + 1) and not e.holds(n - 1)
