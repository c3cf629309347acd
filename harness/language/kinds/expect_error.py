"""``expect_error``: the run, or a named phase of it, raises this exception with this message.

A spec with an ``expect_error`` entry makes the loader set ``RunSetup.record_errors``: an
exception a rank raises is then recorded in its observation (``ranks[].error``: type, module-
qualified name, message, the phase it left, the end of its traceback) instead of failing the
run, and the rank's other observations hold what was recorded up to it. A different error, or
none, fails the entry and the report shows what was expected and what was observed per rank
(``null`` for none). Ranks that fail only because a peer's failure broke their collective
record that error (gloo's closed connection), so ``ranks:`` picks the ones that matter.
A rank whose process dies (a signal, ``os._exit``) is in the observation's ``deaths``
(``died``, ``signal``, ``exit_code``, its last phase), not in its ``ranks``.
"""

from __future__ import annotations

from harness.contract.names import PHASES
from harness.language.kinds.common import RANKS
from harness.language.observed import CheckError, named_ranks, rank_docs
from harness.language.vocabulary import BOOL, MESSAGE, OPTIONAL_INT, SIGNAL, CheckKind, Field, Reads, one_of

_PHASES = PHASES + ("replica",)


def _raised(r) -> dict:
    if "error" not in r:
        raise CheckError(
            f"rank {r['rank']}: errors were not recorded in this observation "
            "(a run whose spec has no expect_error entry)"
        )
    e = r["error"] or {}
    fields = ("type", "qualname", "message", "phase", "hook")
    return {"raised": bool(e), **{k: e.get(k) for k in fields}, "died": False, "signal": None, "exit_code": None}


def _died(d) -> dict:
    nothing = dict.fromkeys(("type", "qualname", "message", "hook"))
    return {
        "raised": False,
        **nothing,
        "phase": d["phase"],
        "died": True,
        "signal": d["signal"],
        "exit_code": d["exit_code"],
    }


def measure(sel, obs):
    died = {d["rank"]: d for d in obs.get("deaths", ())}
    wanted = named_ranks(sel.get("ranks"))
    live = None if wanted is None else [r for r in wanted if r not in died]
    out = {r["rank"]: _raised(r) for r in rank_docs(obs, live)}
    out.update({rank: _died(d) for rank, d in died.items() if wanted is None or rank in wanted})
    return dict(sorted(out.items()))


KIND = CheckKind(
    name="expect_error",
    order=200,
    reads=(Reads("error"), Reads("deaths", ("died", "signal", "exit_code"))),
    simulation_differs={
        "message": "raises a kernel's error from the fake tensor's meta kernel, whose message may differ from the "
        "device kernel's (the type, phase and ranks are checked)"
    },
    setup={"record_errors": True},  # a rank's exception is recorded, not a failed run
    doc="what a rank raised (recorded, not a failed run): exception type, message, the phase it left",
    selectors=(RANKS,),
    fields=(
        Field("raised", BOOL, "whether the rank raised"),
        Field("type", MESSAGE, "the exception's class name, e.g. RuntimeError (null: none raised)"),
        Field("qualname", MESSAGE, "module and class, e.g. torch.distributed.DistBackendError"),
        Field("message", MESSAGE, "the exception's message; {matches: REGEX} to match part of it"),
        Field(
            "phase",
            one_of("phase", _PHASES),
            "the innermost phase the error left: setup, replica, forward, backward, optimizer (a rank that died: "
            "the phase it was last seen in)",
        ),
        Field(
            "died",
            BOOL,
            "the rank's process ended without a result (a signal, os._exit): nothing else of it is observed",
        ),
        Field("signal", SIGNAL, "the signal that ended the rank, e.g. SIGSEGV (null: none)"),
        Field("exit_code", OPTIONAL_INT, "its process's exit code, -N for signal N (null: it did not die)"),
        Field(
            "hook",
            MESSAGE,
            "the spec's hook it was raised in ({matches: REGEX}, e.g. after_fully_shard); null: none. The type and "
            "message are then the hook's own exception's, e.g. torch's ValueError",
        ),
    ),
    measure=measure,
)
