"""``custom``: what a spec's own ``setup.hooks.observe`` function returned, per rank and step.

The hook returns a mapping of JSON values after each step (``harness.run.rank.hooks``); the
observation keeps it as ``rank.custom: [{step_index, values}]``. An entry's fields are that
mapping's keys, expected exactly, rounded or bounded like any other field.
"""

from __future__ import annotations

from harness.language.kinds.common import RANKS, STEP_INDEX, position_matches
from harness.language.observed import CheckError, common, rank_docs
from harness.language.vocabulary import JSON, CheckKind, Reads


def measure(sel, obs):
    out = {}
    for r in rank_docs(obs, sel.get("ranks")):
        chosen = [c for c in r.get("custom") or [] if position_matches(c, sel)]
        if not chosen:
            raise CheckError(
                f"rank {r['rank']}: no custom observation recorded"
                f"{' at step ' + str(sel['step_index']) if 'step_index' in sel else ''} "
                f"(setup.hooks.observe names the function that returns one)"
            )
        names = {k for c in chosen for k in c["values"]}
        out[r["rank"]] = {k: common([c["values"].get(k) for c in chosen]) for k in sorted(names)}
    return out


KIND = CheckKind(
    name="custom",
    order=220,
    reads=(Reads("custom"),),
    doc="the values the spec's own setup.hooks.observe function returned (per rank, after each step)",
    selectors=(STEP_INDEX, RANKS),
    fields=(),
    measure=measure,
    open_fields=JSON,
)
