"""Strict JSON for the files the harness writes: non-finite numbers as strings, read back as numbers.

Python's ``json`` writes ``float("inf")`` as the bare token ``Infinity`` (and ``NaN``), which
RFC 8259 does not allow and strict parsers (``jq``, JavaScript's ``JSON.parse``, Go, Rust's
serde_json) reject. A spec may hold them (``clip_grad_norm: {norm_type: .inf}``, recorded in
the setup and each ``grad_norms`` record). :func:`dumps` writes such a value as the string of
the same token (``"Infinity"``, ``"-Infinity"``, ``"NaN"``); :func:`loads` turns exactly those
strings back into floats, so a document round-trips (and files written before, with the bare
tokens, read the same).
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["NON_FINITE", "dumps", "loads", "encode", "decode"]

NON_FINITE = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}
"""The strings that stand for non-finite floats (the tokens Python's ``json`` writes bare)."""


def _token(x: float) -> str:
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def encode(value: Any) -> Any:
    """``value`` with every non-finite float replaced by its string (mappings and lists copied)."""
    if isinstance(value, float) and not math.isfinite(value):
        return _token(value)
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    return value


def decode(value: Any) -> Any:
    """The inverse of :func:`encode`: the strings of :data:`NON_FINITE` back to floats."""
    if isinstance(value, str):
        return NON_FINITE.get(value, value)
    if isinstance(value, dict):
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """RFC 8259 JSON text of ``value`` (``json.dumps`` keyword arguments apply; never bare ``Infinity``)."""
    return json.dumps(encode(value), allow_nan=False, **kwargs)


def loads(text: str) -> Any:
    """JSON text from :func:`dumps` or ``json.dumps``, non-finite values restored (JSONDecodeError: not JSON)."""
    return decode(json.loads(text))
