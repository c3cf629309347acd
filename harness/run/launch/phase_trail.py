"""Each local rank's phases, in shared memory, for the launcher's progress and timeout reports.

The codes are indices into ``harness.contract.names.RANK_PHASES``, the one phase table; a
name that is not in it raises (it is never reported as another phase).
"""

from __future__ import annotations

from typing import Any, Callable

from harness.contract.names import RANK_PHASES, rank_phase_code

__all__ = ["PhaseTrail", "report_trail"]


class PhaseTrail:
    """Each rank's phases in the order it entered them, in shared memory: a count and a ring of
    the last :attr:`DEPTH` phase codes per rank. The parent polls a few times a second, so a
    phase that lasts milliseconds (the optimizer step of a small model) would be missed by a
    plain "current phase" slot; the trail lets the parent report every phase it passed.
    Each rank writes only its own row (code first, then count), so no lock is needed.

    Args:
        ctx: the multiprocessing context the ranks are started from.
        world_size: ranks.
    """

    DEPTH = 32

    def __init__(self, ctx: Any, world_size: int) -> None:
        self.world_size = world_size
        self.array = ctx.Array("i", world_size * (1 + self.DEPTH), lock=False)

    def enter(self, rank: int, name: str) -> None:
        """Rank ``rank`` enters phase ``name``.

        Raises:
            ValueError: ``name`` is not in ``RANK_PHASES``.
        """
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
    """Call on_progress once per phase step since the last report, every rank's trail in step:
    a rank with fewer new phases stays at its latest. ``reported`` (counts) is updated."""
    counts = trail.counts()
    trails = {r: trail.since(r, reported[r], counts[r]) or [trail.current(r)] for r in range(trail.world_size)}
    for k in range(max(len(t) for t in trails.values())):
        on_progress({r: t[min(k, len(t) - 1)] for r, t in trails.items()})
    reported[:] = counts
