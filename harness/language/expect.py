"""Expected values as a spec writes them, and how an observed value is held against them.

A spec writes what the document prints. Three forms:

* exact: an int, a bool, a string, ``null``, or a list (a shape): equality.
  ``[128, 512]``, ``590112``, ``float16``, ``"2,360,448"`` (commas allowed in a quoted int).
* rounded, like the document: ``"≈2.36M"``, ``"4.72 MB"``, ``"~10.6 MB"``, ``"≈590K"``,
  optionally multiplied: ``"2 × 10.6 MB"``. The tolerance is half a unit of the last printed
  digit (``"4.72 MB"`` holds 4,715,000..4,725,000 bytes), times the multiplier.
  Suffixes: K, M, G (counts, 10^3, 10^6, 10^9); B, KB, MB, GB (bytes, powers of 10: the
  document's MB is 10^6 bytes); KiB, MiB, GiB (powers of 2).
* a bound: ``"<= 1e-3"``, ``"< 0.01"``, ``">= 1"``, ``"== 0"``.
* a pattern: ``{matches: "PREMUL_SUM.*Gloo"}``: a string the regular expression finds
  (``re.search``) in; for messages, whose exact wording a spec should not pin.

Raises :class:`ExpectationError` (a ValueError) for a string that looks numeric but cannot be
read, so a typo in a spec fails loudly at load time rather than comparing as text.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

UNIT_SCALE: dict[str, float] = {
    "": 1.0,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "B": 1.0,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "KiB": 2.0**10,
    "MiB": 2.0**20,
    "GiB": 2.0**30,
}
BYTE_UNITS = frozenset({"B", "KB", "MB", "GB", "KiB", "MiB", "GiB"})
"""Units of a rounded size in bytes."""
COUNT_UNITS = frozenset({"", "K", "M", "G"})
"""Units of a rounded count (K = 10^3 ...); "" is a plain rounded number."""

_ROUNDED = re.compile(
    r"^\s*(?P<approx>[≈~])?\s*(?:(?P<mult>\d+)\s*[×x*]\s*)?"
    r"(?P<num>\d[\d,]*(?:\.(?P<dec>\d+))?)\s*(?P<unit>KiB|MiB|GiB|KB|MB|GB|K|M|G|B)?\s*$"
)
_BOUND = re.compile(r"^\s*(?P<op><=|>=|==|<|>)\s*(?P<num>[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*$")
_LOOKS_NUMERIC = re.compile(r"^\s*[≈~<>=]|^\s*\d")
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "<": operator.lt,
    ">": operator.gt,
}


class ExpectationError(ValueError):
    """A spec value that cannot be read as an expectation."""


@dataclass(frozen=True)
class Expectation:
    """One expected value and how to compare against it.

    Attributes:
        raw: the value as written in the spec.
        form: "exact", "rounded", "bound" or "pattern" (value: the regular expression).
        value: the target (for rounded: in base units, elements or bytes).
        tolerance: absolute tolerance in base units (rounded only), else 0.
        unit: the printed unit ("MB", "K", ...), "" if none.
        op: comparison operator for a bound.
    """

    raw: Any
    form: str
    value: Any
    tolerance: float = 0.0
    unit: str = ""
    op: str = ""

    def holds(self, observed: Any) -> bool:
        """True when ``observed`` meets this expectation. Non-numbers never meet a numeric one."""
        if self.form == "exact":
            return _normalize(observed) == _normalize(self.value)
        if self.form == "pattern":
            return isinstance(observed, str) and re.search(self.value, observed) is not None
        if isinstance(observed, bool) or not isinstance(observed, (int, float)):
            return False
        if self.form == "rounded":
            return abs(observed - self.value) <= self.tolerance * (1 + 1e-12)
        return _OPS[self.op](observed, self.value)

    def describe(self) -> str:
        """Human text of what is expected, with the tolerance spelled out."""
        if self.form == "exact":
            return _show(self.value)
        if self.form == "pattern":
            return f"a string matching /{self.value}/"
        if self.form == "bound":
            return f"{self.op} {_show(self.value)}"
        scale = UNIT_SCALE[self.unit]
        return f"{self.raw} (= {_show(self.value / scale)} {self.unit} ± {_show(self.tolerance / scale)} {self.unit})".replace(
            "  ", " "
        )

    def show_observed(self, observed: Any) -> str:
        """Observed value in the expectation's units, e.g. ``4,720,896 B = 4.7209 MB``."""
        if (
            self.form == "rounded"
            and isinstance(observed, (int, float))
            and not isinstance(observed, bool)
            and self.unit
        ):
            base = "B" if self.unit in BYTE_UNITS else ""
            scaled = observed / UNIT_SCALE[self.unit]
            return f"{_show(observed)}{' ' + base if base else ''} = {scaled:.4g} {self.unit}"
        return _show(observed)


def parse_expectation(raw: Any) -> Expectation:
    """Read a spec value as an :class:`Expectation` (see the module docstring for forms).

    Raises:
        ExpectationError: a string that starts like a number or bound but does not parse, or a
            pattern that is not a regular expression.
    """
    if isinstance(raw, Mapping) and list(raw) == ["matches"]:
        pattern = raw["matches"]
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise ExpectationError(f"cannot read {pattern!r} as a regular expression: {exc}") from None
        return Expectation(dict(raw), "pattern", pattern)
    if isinstance(raw, str):
        m = _ROUNDED.match(raw)
        if m:
            decimals = len(m["dec"] or "")
            unit = m["unit"] or ""
            mult = int(m["mult"]) if m["mult"] else 1
            scale = UNIT_SCALE[unit]
            number = float(m["num"].replace(",", ""))
            if not m["approx"] and not unit and mult == 1 and decimals == 0:
                return Expectation(raw, "exact", int(number))  # "2,360,448": an exact int
            half_ulp = 0.5 * 10.0 ** (-decimals) * scale * mult
            return Expectation(raw, "rounded", number * scale * mult, half_ulp, unit)
        m = _BOUND.match(raw)
        if m:
            return Expectation(raw, "bound", float(m["num"].replace(",", "")), op=m["op"])
        if _LOOKS_NUMERIC.match(raw):
            raise ExpectationError(
                f"cannot read {raw!r} as a figure: expected e.g. '4.72 MB', '≈590K', '2 × 10.6 MB', '<= 1e-3'"
            )
    return Expectation(raw, "exact", raw)


def _normalize(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_normalize(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalize(v) for k, v in value.items()}
    return value


def _show(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "null"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return f"{int(value):,}"
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
            return f"{value:.3e}"
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):  # a shape or a list: [2, 8, 1024], no separators
        return (
            "[" + ", ".join(str(v) if isinstance(v, int) and not isinstance(v, bool) else _show(v) for v in value) + "]"
        )
    return str(value)


def show(value: Any) -> str:
    """Format an observed or expected value for a report (ints with thousands separators)."""
    return _show(value)


__all__ = ["Expectation", "ExpectationError", "parse_expectation", "show", "UNIT_SCALE", "BYTE_UNITS", "COUNT_UNITS"]
