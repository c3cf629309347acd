"""Hints for a name that is not one of the valid ones: the closest valid names first.

A hint that lists every valid name in a fixed order can bury (or, cut to fit one line, lose)
the one the author meant; :func:`did_you_mean` names it up front and :func:`closest_first`
puts the likely ones at the head of any list shown.
"""

from __future__ import annotations

import difflib
from typing import Iterable

__all__ = ["closest", "closest_first", "did_you_mean"]


def closest(value: object, valid: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` valid names the author most likely meant by ``value``, best first.

    The longest valid name that ``value`` ends with as whole dotted components comes first
    (``layers.1`` for ``model.layers.1``: a prefix too many; then it is the only one), else names close in spelling
    (``difflib``, ratio at least 0.6). Case is ignored. [] when none is close.
    """
    if not isinstance(value, str) or not value:
        return []
    names = list(dict.fromkeys(v for v in valid if isinstance(v, str) and v))
    low = value.lower()
    lowered = {v.lower(): v for v in names}
    dotted = sorted((v for v in names if low.endswith("." + v.lower())), key=len, reverse=True)[:1]
    if dotted:  # the name itself, written under a prefix: nothing else is as likely
        return dotted
    spelled = [lowered[m] for m in difflib.get_close_matches(low, list(lowered), n=n, cutoff=0.6)]
    return list(dict.fromkeys(dotted + spelled))[:n]


def closest_first(value: object, valid: Iterable[str]) -> list[str]:
    """``valid`` with :func:`closest`'s names moved to the front (the rest keep their order)."""
    valid = list(valid)
    near = closest(value, valid)
    return near + [v for v in valid if v not in near]


def did_you_mean(value: object, valid: Iterable[str]) -> str:
    """``"did you mean 'layers.1'? "`` (or two or three names), '' when no valid name is close."""
    near = closest(value, valid)
    if not near:
        return ""
    return f"did you mean {' or '.join(repr(v) for v in near)}? "
