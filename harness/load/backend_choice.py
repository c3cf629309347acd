"""Which backend a spec runs on when the user asks for one (``run --backend``, ``render --backend``,
the plugin's ``--fsdp2-backend``).

A spec whose ``backend:`` is ``auto`` (or absent) takes it; a pinned spec keeps its own, because the
pin is part of what it checks (``specs/premul_sum_refused_on_gloo.yaml``), unless ``force``
(``--force-backend``, ``--fsdp2-force-backend``). Pure functions of strings: no torch.
"""

from __future__ import annotations

__all__ = ["chosen_backend", "kept_backend_note"]


def chosen_backend(pinned: str, requested: str | None, force: bool = False) -> str:
    """The backend to run a spec on: ``pinned`` is the spec's ``backend:`` (``auto`` when absent),
    ``requested`` the user's (None: not given), ``force`` whether it overrides pinned specs too."""
    if requested is None or requested == pinned:
        return pinned
    if pinned == "auto" or force:
        return requested
    return pinned


def kept_backend_note(
    name: str, pinned: str, requested: str | None, force: bool = False, force_flag: str = "--force-backend"
) -> str | None:
    """One line saying that spec ``name`` kept its pinned backend instead of ``requested`` (and the
    flag that would force it), or None when the requested backend applies (or none was asked)."""
    if requested in (None, pinned) or chosen_backend(pinned, requested, force) != pinned:
        return None
    return (
        f"note: {name} keeps its backend {pinned} (pinned in the spec), not {requested}; "
        f"{force_flag} runs it on {requested}"
    )
