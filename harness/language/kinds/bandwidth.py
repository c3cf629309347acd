"""``bandwidth``: the timed collectives of ``setup.bandwidth`` in nccl-tests' terms: busbw,
algbw, time, #wrong, sizes.

Rows come from :func:`harness.language.algbw_busbw.bandwidth_rows` (algbw = S / t, busbw = algbw x
(n-1)/n for all-gather and reduce-scatter, x 2(n-1)/n for all-reduce; GB/s = 10^9 bytes/s).
An entry selects rows by ``op`` and ``size`` (a name of ``setup.bandwidth.sizes``, or ``step``
for the step's own collectives); over the selected rows ``busbw`` and ``algbw`` are the least,
``time_us`` the longest, and ``wrong`` each rank's sum, so ``busbw: ">= 20"`` is a minimum
every selected row must reach. busbw, algbw and time are world figures (the mean time over
ranks), the same on every rank; ``wrong`` is per rank.
"""

from __future__ import annotations

from typing import Any

from harness.contract.names import BANDWIDTH_OPS
from harness.language.kinds.common import RANKS
from harness.language.observed import CheckError, NotMeasured, common, rank_docs
from harness.language.vocabulary import BOOL, BYTES, COUNT, DTYPE, NUMBER, CheckKind, Context, Field, Reads, Selector


def _names(value: Any) -> list | None:
    values = value if isinstance(value, list) else [value]
    return values if all(isinstance(v, str) for v in values) else None


def _check_op(value: Any, ctx: Context) -> str | None:
    ops = _names(value)
    bad = [v for v in (ops or [value]) if v not in BANDWIDTH_OPS]
    return f"expected one of {list(BANDWIDTH_OPS)} or a list of them, got {value!r}" if bad or ops is None else None


def _sizes(ctx: Context) -> tuple[str, ...] | None:
    """The names of setup.bandwidth's sizes plus "step" (() when it times nothing), or None if unknown."""
    setup = ctx.known_setup("bandwidth")
    if setup is None:
        return None
    timed = setup.get("bandwidth")
    if timed is None:
        return ()
    return tuple(s["name"] for s in timed["sizes"]) + (("step",) if timed["step"] else ())


def _check_size(value: Any, ctx: Context) -> str | None:
    names = _names(value)
    if names is None:
        return f"expected a size name of setup.bandwidth.sizes, 'step', or a list of them, got {value!r}"
    sizes = _sizes(ctx)
    if sizes is None:
        return None
    if not sizes:
        return "setup.bandwidth is not set: this setup times no collective"
    unknown = [n for n in names if n not in sizes]
    return f"no size named {', '.join(map(repr, unknown))}; setup.bandwidth times {list(sizes)}" if unknown else None


def _needs_bandwidth(values, ctx: Context):
    if _sizes(ctx) == () and "size" not in values:
        return [(None, "setup.bandwidth is not set: this setup times no collective")]
    return []


def _one_or_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def measure(sel, obs):
    docs = rank_docs(obs, sel.get("ranks"))
    if obs["environment"]["simulated"]:
        reason = NotMeasured("a simulated run (fake backend) moves no data: nothing to time")
        return {d["rank"]: {f.name: reason for f in KIND.fields} for d in docs}
    from harness.language.algbw_busbw import (
        bandwidth_rows,
    )  # here: loading a spec (validate) need not build its dataclass

    rows = bandwidth_rows(obs)
    if not rows:
        raise CheckError("no collective was timed: the setup has no setup.bandwidth")
    chosen = [
        r
        for r in rows
        if ("op" not in sel or r.op in _one_or_list(sel["op"]))
        and ("size" not in sel or r.name in _one_or_list(sel["size"]))
    ]
    if not chosen:
        timed = sorted({f"{r.op} {r.name}" for r in rows})
        raise CheckError(
            f"no timed row matches op {sel.get('op', 'any')!r}, size {sel.get('size', 'any')!r}; timed: {timed}"
        )
    world = {
        "busbw": min(r.busbw for r in chosen),
        "algbw": min(r.algbw for r in chosen),
        "time_us": max(r.time_us for r in chosen),
        "size_bytes": common([r.size_bytes for r in chosen]),
        "requested_bytes": common([r.requested_bytes for r in chosen]),
        "count": common([r.count for r in chosen]),
        "dtype": common([r.dtype for r in chosen]),
        "group_size": common([r.group_size for r in chosen]),
        "capped": any(r.capped for r in chosen),
        "rows": len(chosen),
    }
    return {d["rank"]: {**world, "wrong": sum(r.wrong_by_rank.get(d["rank"], 0) for r in chosen)} for d in docs}


KIND = CheckKind(
    name="bandwidth",
    order=180,
    reads=(Reads("bandwidth"),),
    doc="timed collectives in nccl-tests' terms (setup.bandwidth): busbw, algbw, time, #wrong, size S",
    selectors=(
        Selector("op", f"which collective: one of {list(BANDWIDTH_OPS)} or a list", _check_op),
        Selector(
            "size",
            "which size: a name of setup.bandwidth.sizes, 'step' (the step's own collectives), or a list",
            _check_size,
        ),
        RANKS,
    ),
    fields=(
        Field(
            "busbw",
            NUMBER,
            "GB/s (10^9 B/s): algbw x (n-1)/n (all-gather, reduce-scatter) or x 2(n-1)/n "
            "(all-reduce); the least over the selected rows: write a minimum as '>= 20'",
        ),
        Field("algbw", NUMBER, "GB/s: S / time; the least over the selected rows"),
        Field("time_us", NUMBER, "microseconds per operation, the mean over ranks; the longest selected row"),
        Field("wrong", COUNT, "elements differing from the expected gathered or reduced values on the rank (#wrong)"),
        Field("size_bytes", BYTES, "S: the all-gather output, the reduce-scatter input, the all-reduce buffer"),
        Field(
            "requested_bytes",
            BYTES,
            "S the size asks for (above size_bytes when setup.bandwidth.cpu_max_bytes capped it)",
        ),
        Field("count", COUNT, "elements of S"),
        Field("dtype", DTYPE, "the dtype timed"),
        Field("group_size", COUNT, "n: ranks in the process group"),
        Field("capped", BOOL, "a selected row ran below its requested size (cpu_max_bytes)"),
        Field("rows", COUNT, "timed rows selected"),
    ),
    measure=measure,
    rules=(_needs_bandwidth,),
)
