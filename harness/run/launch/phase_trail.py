"""Each local rank's phases, in shared memory, for the launcher's progress and timeout reports.
Codes index ``harness.contract.names.RANK_PHASES``."""

from __future__ import annotations

from typing import Any, Callable

from harness.contract.names import RANK_PHASES, rank_phase_code

__all__ = ["PhaseTrail", "report_trail"]


class PhaseTrail:
    """Per rank, a count and a ring of the last :attr:`DEPTH` phase codes, so that the parent, polling a
    few times a second, reports every phase passed, even a millisecond one. Each rank writes only its
    own row (code, then count): no lock."""

    DEPTH = 32

    def __init__(self, ctx: Any, world_size: int) -> None:
        self.world_size = world_size
        self.array = ctx.Array("i", world_size * (1 + self.DEPTH), lock=False)

    def enter(self, rank: int, name: str) -> None:
        """Rank ``rank`` enters phase ``name`` (ValueError if not in ``RANK_PHASES``)."""
        code = rank_phase_code(name)
        row = rank * (1 + self.DEPTH)
        count = self.array[row]
        self.array[row + 1 + count % self.DEPTH] = code
        self.array[row] = count + 1

    def current(self, rank: int) -> str:
        """The phase ``rank`` entered last (``starting`` before any)."""
        row = rank * (1 + self.DEPTH)
        count = self.array[row]
        return RANK_PHASES[self.array[row + 1 + (count - 1) % self.DEPTH]] if count else RANK_PHASES[0]

    def counts(self) -> list[int]:
        return [self.array[r * (1 + self.DEPTH)] for r in range(self.world_size)]

    def since(self, rank: int, seen: int, count: int) -> list[str]:
        """The phases rank entered after its first ``seen`` ones, up to ``count`` (the last DEPTH at most)."""
        row = rank * (1 + self.DEPTH)
        return [RANK_PHASES[self.array[row + 1 + i % self.DEPTH]] for i in range(max(seen, count - self.DEPTH), count)]


def report_trail(trail: PhaseTrail, reported: list[int], on_progress: Callable[[dict[int, str]], None]) -> None:
    """Call on_progress once per phase step since ``reported`` (updated); a rank with fewer new phases
    stays at its latest."""
    counts = trail.counts()
    trails = {r: trail.since(r, reported[r], counts[r]) or [trail.current(r)] for r in range(trail.world_size)}
    for k in range(max(len(t) for t in trails.values())):
        on_progress({r: t[min(k, len(t) - 1)] for r, t in trails.items()})
    reported[:] = counts
