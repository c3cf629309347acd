"""Simulated (fake backend) and real (gloo) ranks agree: which fields a simulation claims, which
shipped specs gloo can hold here, the disagreements of two observation documents and of the
judge's verdicts on them.

:func:`fake_claims` is the one rule of which observed fields a simulated run claims to observe
as a real rank would, and are stable from one gloo run to the next; it reads the field
declarations (``harness/contract/fields.py``), which give the reason for everything it leaves
out. Observations are compared as ``harness.report.compare.flatten_observation`` flattens them
(one value per :class:`Key`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from harness.contract import fields
from harness.report.compare import Key, flatten_observation, record_of

__all__ = [
    "HOLD_BYTES",
    "MAX_GLOO_RANKS",
    "PEER_ERRORS",
    "Candidate",
    "candidates",
    "disagreements",
    "fake_claims",
    "verdict_disagreements",
]

# --- which fields a simulation claims ---------------------------------------------------------


def fake_claims(key: Key) -> bool:
    """Whether a simulated run claims the value at ``key`` (a flattened observation's key) as a
    real gloo rank observes it, and gloo observes it the same in every run: read from the field
    declarations (:mod:`harness.contract.fields`), which say why each other field is left out.

    Claimed: behaviour fields (not where the ranks ran, timings or tracebacks) that the fake world
    observes (:func:`~harness.contract.fields.observed_in`: not numerics, parameter updates,
    bandwidth, checkpoints, state-dict calls, values of fake tensors, ``temp`` and ``total``,
    memory peaks) and that are stable on gloo (:func:`~harness.contract.fields.stable`: not an
    error's message, which names ports)."""
    declared = fields.lookup(key.path)
    if declared.aspect != "behaviour":
        return False
    record = record_of(key)
    return fields.observed_in(key.path, "fake", record) and fields.stable(key.path, "gloo", record)


def disagreements(fake: Mapping[str, Any], real: Mapping[str, Any], limit: int = 20) -> list[str]:
    """Every value ``fake`` claims (:func:`fake_claims`) that differs from ``real``'s at the same
    key, or is present in one document only; one line each (at most ``limit``, then a count)."""
    a, b = flatten_observation(fake), flatten_observation(real)
    missing = object()
    lines = []
    for key in sorted(set(a) | set(b), key=repr):
        if not fake_claims(key):
            continue
        x, y = a.get(key, missing), b.get(key, missing)
        if x != y:
            show = lambda v: "absent" if v is missing else repr(v)  # noqa: E731
            lines.append(f"{key.part} rank {key.rank} {key.selector} {key.field}: fake {show(x)}, gloo {show(y)}")
    if len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more"]
    return lines


def verdict_disagreements(spec: Any, fake: Mapping[str, Any], real: Mapping[str, Any]) -> list[str]:
    """The entries of ``spec`` the judge answers differently on ``fake`` than on ``real``, except
    where it skips on ``fake`` (with its reason): one line each. A simulated run answers as the
    real one or says why it cannot."""
    from harness.judge.evaluate import evaluate_spec

    lines = []
    for a, b in zip(evaluate_spec(spec, fake), evaluate_spec(spec, real)):
        if a.status != b.status and a.status != "skip":
            lines.append(f"{a.entry.id} ({a.entry.check}): fake {a.status}, gloo {b.status}: {a.message or ''}"[:300])
    return lines


# --- which shipped specs gloo can hold here ---------------------------------------------------

MAX_GLOO_RANKS = 8
"""Rank processes at most: each imports torch (about 0.3 GB and seconds of CPU apiece)."""
HOLD_BYTES = 4 * 2**30
"""The ranks' estimated bytes together at most (``harness.run.preflight.estimate``): a sixth of
this 24 GiB machine, shared by several test sessions."""


PEER_ERRORS: dict[str, str] = {
    "clip_grad_norm_inf_empty_shard": "its ranks 2-3 raise (_foreach_norm, inf norm of an empty shard) and "
    "on gloo ranks 0-1 then fail on the closed connection; each simulated rank runs alone, so ranks 0-1 "
    "finish the step: their observations differ past the error (the judge's verdicts are compared)",
}
"""Specs whose real ranks fail because a peer failed: no simulation observes that, so only the
judge's verdicts are compared."""


@dataclass(frozen=True)
class Candidate:
    """A shipped spec and why the agreement test leaves it out (None: it is compared)."""

    path: Path
    excluded: str | None


def candidates(folder: Path) -> list[Candidate]:
    """Every ``*.yaml`` spec of ``folder`` in name order, each compared or excluded with a reason:

    - a real run whose ranks fail because a peer failed (:data:`PEER_ERRORS`);
    - a spec that names its backend (``backend: gloo`` pins a gloo behaviour, ``backend: fake``
      a world too large for real ranks);
    - more than :data:`MAX_GLOO_RANKS` ranks, or more than :data:`HOLD_BYTES` estimated for the
      ranks together (Qwen3-0.6B on 8 ranks: tests/integration/test_simulated_agrees.py
      compares it, under the heavy lock)."""
    from harness.load.spec import load_spec
    from harness.run.preflight import estimate

    out = []
    for path in sorted(folder.glob("*.yaml")):
        spec = load_spec(path)
        setup, why = spec.setup, None
        if path.stem in PEER_ERRORS:
            why = PEER_ERRORS[path.stem]
        elif spec.backend != "auto":
            why = f"pinned to backend {spec.backend}"
        elif setup.world_size > MAX_GLOO_RANKS:
            why = f"{setup.world_size} ranks (at most {MAX_GLOO_RANKS} gloo ranks here)"
        else:
            est = estimate(setup)
            need = est.per_rank * setup.world_size + est.replica_once
            if need > HOLD_BYTES:
                why = f"{need / 2**30:.1f} GiB estimated for its ranks (at most {HOLD_BYTES / 2**30:.0f} GiB here)"
        out.append(Candidate(path, why))
    return out
