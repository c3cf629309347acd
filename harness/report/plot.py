"""Memory timeline per rank: ``FSDPMemTracker``'s categories across the step, as PNG and SVG.

:func:`memory_timeline` (pure) orders a rank's ``ranks[].memory`` snapshots as FSDP2 runs the hooks
for a stack of layers: the root's pre-forward, each layer's pre- and post-forward in ``fully_shard``
order, the root's post-forward; backward likewise in reverse; then after ``optimizer.step()``.
``Peak Forward`` / ``Peak Backward`` are maxima, not moments, and are left out.

Lines (bytes, drawn in MB = 10^6 bytes): the tracker's whole-rank categories, and each unit's own
parameter shards (local elements x element size); each layer's compute is shaded.
:func:`plot_memory` needs matplotlib (``pip install .[plot]``), else :class:`PlotUnavailable`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.report.figures import MB, mb

__all__ = ["Timeline", "memory_timeline", "plot_memory", "PlotUnavailable", "CATEGORIES", "INSTALL_HINT"]

#: Tracker categories drawn, in legend order.
CATEGORIES = ("sharded_param", "unsharded_param", "sharded_grad", "unsharded_grad", "optstate", "activation")
INSTALL_HINT = (
    "matplotlib is not installed: --plot needs it (pip install 'fsdp2-conformance[plot]' or pip install matplotlib)"
)

_FORWARD = ("Before Pre-Forward", "After Pre-Forward", "Before Post-Forward", "After Post-Forward")
_BACKWARD = ("Before Pre-Backward", "After Pre-Backward", "Before Post-Backward", "After Post-Backward")
_SHORT = {
    "Before": "before",
    "After": "after",
    "Pre-Forward": "pre-fwd",
    "Post-Forward": "post-fwd",
    "Pre-Backward": "pre-bwd",
    "Post-Backward": "post-bwd",
    "Optimizer Step": "optimizer step",
}


class PlotUnavailable(RuntimeError):
    """matplotlib is missing (the message is one line saying how to install it)."""


@dataclass
class Timeline:
    """One rank's memory along the step: ``points`` (unit, state) in step order (unit '' is the root),
    ``series`` category -> bytes at each point, ``unit_shards`` unit -> its shard bytes, ``spans``
    (unit, phase, first, last point index) of each layer's compute."""

    rank: int
    points: list[tuple[str, str]] = field(default_factory=list)
    series: dict[str, list[int]] = field(default_factory=dict)
    unit_shards: dict[str, int] = field(default_factory=dict)
    spans: list[tuple[str, str, int, int]] = field(default_factory=list)

    def labels(self) -> list[str]:
        """Short x-axis labels: "layers.0 after pre-fwd"."""
        out = []
        for unit, state in self.points:
            words = [_SHORT.get(w, w) for w in state.split(" ", 1)]
            out.append(
                f"{unit or 'root'} {' '.join(words)}"
                if unit or state != "After Optimizer Step"
                else "after optimizer step"
            )
        return out


def memory_timeline(observation: Mapping[str, Any], rank: int) -> Timeline:
    """The :class:`Timeline` of ``rank`` (KeyError if it was not observed)."""
    docs = {d["rank"]: d for d in observation["ranks"]}
    if rank not in docs:
        raise KeyError(f"rank {rank} not observed; observed ranks {sorted(docs)}")
    doc = docs[rank]
    snaps: dict[tuple[str, str], list[Mapping[str, int]]] = {}
    for m in doc["memory"]:
        snaps.setdefault((m["module"], m["state"]), []).append(m["bytes"])
    units = observation["fsdp_units"]
    layers = [u["name"] for u in units if u["role"] != "root"]
    roots = [u["name"] for u in units if u["role"] == "root"]
    order: list[tuple[str, str]] = []
    spans: list[tuple[str, str, int, int]] = []

    def add(unit: str, states: Sequence[str]) -> None:
        for state in states:
            order.extend([(unit, state)] * len(snaps.get((unit, state), [])))

    def add_layer(unit: str, states: Sequence[str], phase: str) -> None:
        start = len(order)
        add(unit, states)
        inside = [i for i in range(start, len(order)) if order[i][1] in (states[1], states[2])]
        if inside:
            spans.append((unit, phase, inside[0], inside[-1]))

    for root in roots:
        add(root, _FORWARD[:2])
    for unit in layers:
        add_layer(unit, _FORWARD, "forward")
    for root in roots:
        add(root, _FORWARD[2:])
        add(root, _BACKWARD[:2])
    for unit in reversed(layers):
        add_layer(unit, _BACKWARD, "backward")
    for root in roots:
        add(root, _BACKWARD[2:])
    add("", ("After Optimizer Step",))

    taken: dict[tuple[str, str], int] = {}
    series: dict[str, list[int]] = {c: [] for c in CATEGORIES}
    for key in order:
        i = taken.get(key, 0)
        taken[key] = i + 1
        for c in CATEGORIES:
            series[c].append(int(snaps[key][i].get(c, 0)))
    shards: dict[str, int] = {}
    for p in doc["params"]:
        shards[p["unit"]] = shards.get(p["unit"], 0) + p["local_numel"] * p["element_size"]
    unit_shards = {u["name"]: shards[u["name"]] for u in units if shards.get(u["name"])}
    return Timeline(rank=rank, points=order, series=series, unit_shards=unit_shards, spans=spans)


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend. Raises PlotUnavailable: not installed
    (:data:`INSTALL_HINT`), or its import fails (one line naming the error)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "matplotlib":
            raise PlotUnavailable(INSTALL_HINT) from None
        first = (str(exc).strip().splitlines() or [""])[0]
        raise PlotUnavailable(
            f"matplotlib is installed but cannot be imported ({type(exc).__name__}: {first}): "
            "--plot needs it (pip install --force-reinstall matplotlib)"
        ) from None
    return plt


def plot_memory(
    observation: Mapping[str, Any], out_dir: str | Path, stem: str, ranks: Sequence[int] | None = None
) -> list[Path]:
    """Draw each of ``ranks`` (default all observed) to ``out_dir/<stem>_memory_rank<r>.png`` and
    ``.svg`` (``out_dir`` exists); the written files. Raises PlotUnavailable."""
    plt = _pyplot()
    out_dir = Path(out_dir)
    env = observation["environment"]
    written = []
    for rank in ranks if ranks is not None else env["observed_ranks"]:
        tl = memory_timeline(observation, rank)
        if not tl.points:
            continue
        x = list(range(len(tl.points)))
        fig, ax = plt.subplots(figsize=(12, 5.2), dpi=100)
        for unit, phase, a, b in tl.spans:
            ax.axvspan(a - 0.4, b + 0.4, color="#4c72b0" if phase == "forward" else "#dd8452", alpha=0.10, lw=0)
            ax.text(
                (a + b) / 2,
                1.0,
                f"{unit}\n{phase}",
                transform=ax.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=8,
                color="#444444",
            )
        styles = {
            "sharded_param": ("#2ca02c", 2.5),
            "unsharded_param": ("#d62728", 2.5),
            "sharded_grad": ("#9467bd", 1.6),
            "unsharded_grad": ("#e377c2", 1.6),
            "optstate": ("#8c564b", 1.6),
            "activation": ("#7f7f7f", 1.4),
        }
        for c in CATEGORIES:
            values = tl.series[c]
            if not any(values):
                continue
            color, width = styles[c]
            ax.plot(
                x,
                [v / MB for v in values],
                marker="o",
                markersize=3.5,
                lw=width,
                color=color,
                label=f"{c} (whole rank; max {mb(max(values))})",
            )
        # Each unit's own shards, stacked: together they make the tracker's sharded_param.
        lower = 0.0
        for i, (unit, nbytes) in enumerate(tl.unit_shards.items()):
            upper = lower + nbytes / MB
            ax.fill_between(
                x,
                lower,
                upper,
                color=("#98df8a", "#c7e9c0")[i % 2],
                alpha=0.55,
                lw=0,
                label=f"{unit or 'root'}: its own shards ({mb(nbytes)})",
            )
            if len(tl.unit_shards) <= 4:
                ax.text(
                    x[0],
                    (lower + upper) / 2,
                    f" {unit or 'root'} shards {mb(nbytes)}",
                    va="center",
                    fontsize=8,
                    color="#1b5e20",
                )
            lower = upper
        peak = max(tl.series["unsharded_param"])
        if peak:
            at = tl.series["unsharded_param"].index(peak)
            ax.annotate(
                f"unsharded {mb(peak)}",
                (at, peak / MB),
                xytext=(4, 6),
                textcoords="offset points",
                fontsize=8,
                color="#d62728",
            )
        ax.set_xticks(x)
        ax.set_xticklabels(tl.labels(), rotation=60, ha="right", fontsize=7.5)
        ax.set_ylabel("MB (10^6 bytes)")
        top = max([max(v) for v in tl.series.values()] + [sum(tl.unit_shards.values())]) / MB
        ax.set_ylim(0, top * 1.12 if top else 1)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        setup = observation["setup"]
        ax.set_title(
            f"rank {rank} of {env['world_size']}: FSDPMemTracker bytes through one step "
            f"({setup['model']['dtype']}, torch {env['torch_version']}, {env['backend']})",
            fontsize=10,
            pad=26,
        )
        fig.tight_layout()
        for ext in ("png", "svg"):
            path = out_dir / f"{stem}_memory_rank{rank}.{ext}"
            fig.savefig(path, metadata={"Date": None} if ext == "svg" else None)
            written.append(path)
        plt.close(fig)
    return written
