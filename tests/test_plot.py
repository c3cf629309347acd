"""The memory timeline (``--plot``): FSDPMemTracker's categories along the step, per rank.

The timeline's data is checked against the document's account (Steps 0 and 11: 4.72 MB
unsharded while the layer computes, back to 0; 1.18 MB of shards per layer throughout) on a
real run; drawing needs matplotlib, an optional dependency: those tests skip without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.load.spec import load_spec
from harness.report.plot import INSTALL_HINT, PlotUnavailable, memory_timeline, plot_memory
from observations import walkthrough_observation

ROOT = Path(__file__).resolve().parents[1]
WALKTHROUGH = ROOT / "specs" / "qwen3_walkthrough.yaml"

# The document's ≈4.72 MB per layer and ≈1.18 MB per rank in fp16 (sections "参数列表（单层）" and
# "每个 rank 上的参数分片"): exact bytes of the walkthrough layer
# in fp16 (2,360,448 and 590,112 elements x 2 bytes, the document's parameter tables).
LAYER_BYTES, SHARD_BYTES = 4_720_896, 1_180_224


def test_real_timeline_tells_the_documents_story(spec_observation):
    spec = load_spec(WALKTHROUGH)
    obs = spec_observation(spec)
    for rank in obs["environment"]["observed_ranks"]:
        tl = memory_timeline(obs, rank)
        unsharded, sharded = tl.series["unsharded_param"], tl.series["sharded_param"]
        # one line per unit: each layer's own shards, 1.18 MB, summing to the tracker's total at every point
        assert tl.unit_shards == {"layers.0": SHARD_BYTES, "layers.1": SHARD_BYTES}
        assert all(s == sum(tl.unit_shards.values()) for s in sharded)
        # forward of each layer, then backward in reverse: 4.72 MB while it computes, 0 before and after
        assert [(u, phase) for u, phase, _, _ in tl.spans] == [
            ("layers.0", "forward"), ("layers.1", "forward"), ("layers.1", "backward"), ("layers.0", "backward")]
        for _, _, first, last in tl.spans:
            assert unsharded[first:last + 1] == [LAYER_BYTES] * (last - first + 1)
            assert unsharded[first - 1] == 0 and unsharded[last + 1] == 0
        assert tl.points[-1] == ("", "After Optimizer Step") and unsharded[-1] == 0


def test_timeline_order_from_synthetic_snapshots():
    tl = memory_timeline(walkthrough_observation(), 0)
    assert tl.points == [
        ("layers.0", "After Pre-Forward"), ("layers.0", "After Post-Forward"),
        ("layers.1", "After Pre-Forward"), ("layers.1", "After Post-Forward"),
        ("layers.1", "After Post-Backward"), ("layers.0", "After Post-Backward"),
        ("", "After Optimizer Step"),
    ]
    with pytest.raises(KeyError, match="rank 9 not observed"):
        memory_timeline(walkthrough_observation(), 9)


def test_draws_png_and_svg(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is optional (pip install .[plot]); nothing to draw with")
    files = plot_memory(walkthrough_observation(), tmp_path, "walk", ranks=[0, 3])
    assert [f.name for f in files] == ["walk_memory_rank0.png", "walk_memory_rank0.svg",
                                       "walk_memory_rank3.png", "walk_memory_rank3.svg"]
    assert files[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = files[1].read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg


def test_without_matplotlib_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(PlotUnavailable) as info:
        plot_memory(walkthrough_observation(), tmp_path, "walk")
    assert str(info.value) == INSTALL_HINT and "\n" not in INSTALL_HINT


def test_cli_without_matplotlib_stops_before_running(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None; from harness.cli import main; "
            f"sys.exit(main(['run', {str(WALKTHROUGH)!r}, '--plot', {str(tmp_path)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout.strip().splitlines() == [f"✗ {INSTALL_HINT}"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["run", "render"])
def test_cli_with_a_matplotlib_that_fails_to_import_stops_before_running(tmp_path, command):
    """An installed matplotlib that cannot be imported (here a stand-in package raising ImportError,
    as a copy built against another numpy does) is found before any rank starts: one line, exit 2,
    no traceback, nothing written. Looking the package up without importing it let the run go on
    and end in a traceback after the step."""
    broken = tmp_path / "site" / "matplotlib"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("numpy.core.multiarray failed to import")\n')
    out = tmp_path / "plots"
    env = {**os.environ, "PYTHONPATH": f"{broken.parent}{os.pathsep}{ROOT}"}
    proc = subprocess.run([sys.executable, "-m", "harness", command, str(WALKTHROUGH), "--plot", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert lines == ["✗ matplotlib is installed but cannot be imported (ImportError: numpy.core.multiarray failed "
                     "to import): --plot needs it (pip install --force-reinstall matplotlib)"], lines
    assert not out.exists()
