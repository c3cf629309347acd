"""The memory timeline (``--plot``): FSDPMemTracker's categories along the step, per rank.

The timeline's data is checked against the document's account (Steps 0 and 11: 4.72 MB
unsharded while the layer computes, back to 0; 1.18 MB of shards per layer throughout) on a
real run; drawing needs matplotlib, an optional dependency: those tests skip without it.
"""

from __future__ import annotations

import sys

import pytest

from harness.report.plot import INSTALL_HINT, PlotUnavailable, memory_timeline, plot_memory
from tests.support.observations import walkthrough_observation


def test_timeline_order_from_synthetic_snapshots():
    tl = memory_timeline(walkthrough_observation(), 0)
    assert tl.points == [
        ("layers.0", "After Pre-Forward"),
        ("layers.0", "After Post-Forward"),
        ("layers.1", "After Pre-Forward"),
        ("layers.1", "After Post-Forward"),
        ("layers.1", "After Post-Backward"),
        ("layers.0", "After Post-Backward"),
        ("", "After Optimizer Step"),
    ]
    with pytest.raises(KeyError, match="rank 9 not observed"):
        memory_timeline(walkthrough_observation(), 9)


def test_draws_png_and_svg(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is optional (pip install .[plot]); nothing to draw with")
    files = plot_memory(walkthrough_observation(), tmp_path, "walk", ranks=[0, 3])
    assert [f.name for f in files] == [
        "walk_memory_rank0.png",
        "walk_memory_rank0.svg",
        "walk_memory_rank3.png",
        "walk_memory_rank3.svg",
    ]
    assert files[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = files[1].read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg


def test_without_matplotlib_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(PlotUnavailable) as info:
        plot_memory(walkthrough_observation(), tmp_path, "walk")
    assert str(info.value) == INSTALL_HINT and "\n" not in INSTALL_HINT
