"""The NCCL flight recorder on CPU: the variable that sizes it for each torch release, and the device
view of its dumps (the oldest collective a rank's device has not completed) on hand-written dumps
in the form torch writes (pickled dicts of ``entries``; tests/integration/test_flight_recorder.py
reads a real one)."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from harness.run.launch import flight_recorder


@pytest.mark.parametrize(
    ("version", "variable"),
    [
        ("2.10.1+cu128", "TORCH_NCCL_TRACE_BUFFER_SIZE"),
        ("2.11.0+cu130", "TORCH_FR_BUFFER_SIZE"),  # 2.11 warns the old name is deprecated
        ("2.12.0.dev20260101", "TORCH_FR_BUFFER_SIZE"),
        ("2.13.0+cpu", "TORCH_FR_BUFFER_SIZE"),
    ],
)
def test_the_buffer_is_sized_by_the_name_the_release_reads(version, variable):
    assert flight_recorder.buffer_size_variable(version) == variable


def test_enable_sets_the_release_s_name_and_keeps_the_user_s(monkeypatch, tmp_path):
    environ = {k: v for k, v in os.environ.items() if "BUFFER_SIZE" not in k}
    monkeypatch.setattr(flight_recorder.os, "environ", environ)
    monkeypatch.setattr(flight_recorder, "buffer_size_variable", lambda version=None: "TORCH_FR_BUFFER_SIZE")
    flight_recorder.enable(str(tmp_path))
    assert environ["TORCH_FR_BUFFER_SIZE"] == "2000" and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in environ
    environ.pop("TORCH_FR_BUFFER_SIZE")
    environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] = "50"  # the user's, under the old name: kept, no second one
    flight_recorder.enable(str(tmp_path))
    assert environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "50" and "TORCH_FR_BUFFER_SIZE" not in environ


def entry(record_id, name, seq, state="scheduled", retired=False):
    return {
        "record_id": record_id,
        "collective_seq_id": seq,
        "profiling_name": name,
        "process_group": ("1", "mesh_dp_replicate"),
        "state": state,
        "retired": retired,
        "input_sizes": [[37024]],
    }


def write(tmp_path, rank, dump, as_json=False):
    path = tmp_path / f"{flight_recorder.FLIGHT_RECORDER_PREFIX}{rank}"
    path.write_bytes(json.dumps(dump).encode() if as_json else pickle.dumps(dump))
    return str(path)


def test_the_device_view_names_the_oldest_collective_not_completed(tmp_path):
    """Rank 0's device finished #1 (retired) and #2 (completed) and waits in #3; the hang recorder
    marked them all "sync" (no Work to watch): this is where the GPU is."""
    stuck = {
        "entries": [
            entry(2, "nccl:all_reduce", 3),
            entry(0, "nccl:all_reduce", 1, retired=True),
            entry(1, "nccl:all_gather_into_tensor_coalesced", 2, state="completed"),
            entry(3, "nccl:reduce_scatter_tensor_coalesced", 4, state="started"),
        ]
    }
    done = {"entries": [entry(0, "nccl:all_reduce", 1, state="completed")]}
    dumps = [write(tmp_path, 0, stuck), write(tmp_path, 1, done, as_json=True)]
    (tmp_path / f"{flight_recorder.FLIGHT_RECORDER_PREFIX}2").write_bytes(b"\x80 cut short")
    dumps.append(str(tmp_path / f"{flight_recorder.FLIGHT_RECORDER_PREFIX}2"))
    lines = flight_recorder.device_view(dumps)
    assert lines[:2] == [
        "rank 0 on the device (flight recorder): oldest not completed nccl:all_reduce #3 (group mesh_dp_replicate, "
        "state scheduled, input sizes [[37024]])",
        "rank 1 on the device (flight recorder): every recorded collective completed",
    ]
    assert lines[2].startswith("rank 2 on the device (flight recorder): unreadable dump (")


def test_a_joined_rank_s_deadline_message_carries_the_device_view(tmp_path):
    from harness.run.launch.joined_deadline import deadline_message

    dump = write(tmp_path, 0, {"entries": [entry(0, "nccl:all_reduce", 1)]})
    progress = {0: {"entered": {"seq": 0, "op": "all_reduce", "unit": "layers.0", "phase": "backward", "sync": True}}}
    text = deadline_message(0, 60, progress, [dump])
    assert "rank 0 on the device (flight recorder): oldest not completed nccl:all_reduce #1" in text
