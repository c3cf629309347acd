"""The device view reads a flight recorder dump as this torch writes it: gloo keeps one too
(``TORCH_FR_BUFFER_SIZE``, ``torch._C._distributed_c10d._dump_fr_trace``), so a one-rank world in
this process checks the entry fields the view reads (``record_id``, ``state``, ``retired``,
``profiling_name``, ``collective_seq_id``) against the real format."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO
from tests.support.cli import harness_env

_DUMP = """
import sys, tempfile, time, torch, torch.distributed as dist
from harness.run.launch import flight_recorder
folder = tempfile.mkdtemp()
dist.init_process_group("gloo", init_method=f"file://{folder}/rdv", rank=0, world_size=1)
t = torch.ones(8)
dist.all_reduce(t)
dist.all_reduce(t, async_op=True).wait()
path = f"{folder}/{flight_recorder.FLIGHT_RECORDER_PREFIX}0"
# gloo marks an entry completed from its worker thread, which may trail the call's return on a
# loaded machine: dump again, for at most 10 s, until no entry is still scheduled
for _ in range(100):
    with open(path, "wb") as f:
        f.write(torch._C._distributed_c10d._dump_fr_trace())
    entries = flight_recorder._load(path)["entries"]
    if all(e.get("state") != "scheduled" for e in entries):
        break
    time.sleep(0.1)
print(len(entries), sorted({e["profiling_name"] for e in entries}))
print(flight_recorder.device_view([path])[0])
dist.destroy_process_group()
"""


def test_a_real_dump_of_finished_collectives_reads_as_completed():
    env = {**harness_env(), "TORCH_FR_BUFFER_SIZE": "100"}
    proc = subprocess.run([sys.executable, "-c", _DUMP], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    count, view = proc.stdout.strip().splitlines()[-2:]
    assert count == "2 ['gloo:all_reduce']"
    assert view == "rank 0 on the device (flight recorder): every recorded collective completed"
