"""Figures in the walkthrough document's units and rounding, with the exact figure beside.

*FSDP2 Qwen3 Decoder Layer Walkthrough* prints three significant digits: counts with K / M
("≈2.36M"), bytes in MB = 10^6 bytes ("4.72 MB"). The spec loader (``harness/language/expect.py``)
reads such a figure as holding within half its last digit, so a figure printed here holds as an
expectation for its value. Pure; no torch."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Iterable

__all__ = ["sig3", "thousands", "approx_count", "mb", "mb_exact", "count_exact", "shape", "ranks_text", "fraction"]

MB = 10**6
GB = 10**9


def sig3(x: float) -> str:
    """``x`` to three significant digits, without exponent: 4.720896 -> "4.72", 590.112 -> "590"."""
    if x == 0:
        return "0"
    decimals = max(0, 2 - math.floor(math.log10(abs(x))))
    text = f"{round(x, decimals):.{decimals}f}"
    return text


def thousands(n: int | float) -> str:
    """An exact integer with thousands separators, "2,360,448"; a non-integer float keeps two decimals."""
    if isinstance(n, float) and not n.is_integer():
        return f"{n:,.2f}".rstrip("0").rstrip(".")
    return f"{int(n):,}"


def approx_count(n: int) -> str:
    """An element count the document's way: "≈2.36M", "≈590K"; below 1000 the exact count."""
    if abs(n) < 1000:
        return str(n)
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if abs(n) >= scale:
            return f"≈{sig3(n / scale)}{suffix}"
    raise AssertionError("unreachable")


def mb(n_bytes: int | float) -> str:
    """Bytes in the document's MB (10^6 bytes), three significant digits: "4.72 MB"; from 10^9 on, GB."""
    if abs(n_bytes) >= GB:
        return f"{sig3(n_bytes / GB)} GB"
    return f"{sig3(n_bytes / MB)} MB"


def mb_exact(n_bytes: int | float) -> str:
    """ "4.72 MB (4,720,896 B)": the rounded figure with the exact byte count beside."""
    return f"{mb(n_bytes)} ({thousands(n_bytes)} B)"


def count_exact(n: int) -> str:
    """ "≈2.36M (2,360,448)"; below 1000 just the count."""
    return str(n) if abs(n) < 1000 else f"{approx_count(n)} ({thousands(n)})"


def shape(dims: Iterable[int]) -> str:
    """A shape as the document writes it: "[2, 8, 512]"."""
    return "[" + ", ".join(str(int(d)) for d in dims) + "]"


def ranks_text(ranks: Iterable[int]) -> str:
    """ "0-3", "0, 2, 5-7": sorted ranks with runs collapsed."""
    ranks = sorted(set(ranks))
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ", ".join(parts)


def fraction(numerator: int, denominator: int) -> str:
    """ "3/4" (reduced)."""
    f = Fraction(numerator, denominator)
    return f"{f.numerator}/{f.denominator}"
