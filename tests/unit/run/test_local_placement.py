"""A rank's place on its node under torchrun, Slurm's srun and Open MPI's mpirun
(harness/run/rank/local_placement.py), and what the joined world does with it on CUDA: no GPU needed,
torch.cuda's counts are emulated."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest

from harness.run.launch import joined
from harness.run.launch.backend import resolve_backend
from harness.run.launch.errors import RunError
from harness.run.launch.joined import joined_world
from harness.run.launch.joined_deadline import JOINED_GRACE_S
from harness.run.rank.local_placement import device_ordinal_problem, local_placement

WORLD = {"RANK": "11", "WORLD_SIZE": "16", "MASTER_ADDR": "n0"}  # 2 nodes x 8 ranks, rank 11 = node 1's 4th
SLURM = {**WORLD, "SLURM_LOCALID": "3", "SLURM_NTASKS_PER_NODE": "8", "SLURM_PROCID": "11"}
OMPI = {**WORLD, "OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"}


@pytest.mark.parametrize(
    "env, variable",
    [
        ({**WORLD, "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8"}, "LOCAL_RANK"),
        (SLURM, "SLURM_LOCALID"),
        (OMPI, "OMPI_COMM_WORLD_LOCAL_RANK"),
    ],
)
def test_each_launcher_gives_the_local_rank_and_size(env, variable):
    assert joined_world(env) == {
        "rank": 11,
        "world_size": 16,
        "local_rank": 3,
        "local_world_size": 8,
        "local_rank_variable": variable,
    }


def test_torchrun_variables_win_over_the_scheduler_ones():
    """torchrun inside an srun allocation: torchrun's LOCAL_RANK is the process's, SLURM_LOCALID the agent's."""
    env = {**SLURM, "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    assert local_placement(env, 11, 16) == {"local_rank": 1, "local_world_size": 4, "local_rank_variable": "LOCAL_RANK"}


def test_no_launcher_variable_is_one_node():
    assert local_placement(WORLD, 11, 16) == {"local_rank": 11, "local_world_size": 16, "local_rank_variable": "RANK"}


def test_a_malformed_variable_is_named():
    with pytest.raises(ValueError, match=r"SLURM_NTASKS_PER_NODE='8\(x2\)': expected a whole number"):
        local_placement({"SLURM_NTASKS_PER_NODE": "8(x2)"}, 0, 16)


@pytest.fixture
def eight_gpus(monkeypatch):
    """torch.cuda as a node with 8 visible GPUs shows it (set_device recorded, not called)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    chosen: list[int] = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    return chosen


def test_auto_picks_nccl_for_an_srun_world_of_two_8_gpu_nodes(eight_gpus):
    """Before: LOCAL_WORLD_SIZE absent, so 16 ranks per node were assumed and auto fell back to gloo."""
    world = joined_world(SLURM)
    assert resolve_backend("auto", world["world_size"], world["local_world_size"]) == ("nccl", "cuda")


def test_the_joined_rank_drives_the_gpu_its_launcher_named(eight_gpus, monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    groups: list[tuple] = []
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: groups.append((a, k)))
    recorders: list[str] = []
    monkeypatch.setattr(joined.flight_recorder, "enable", recorders.append)  # it would set this process's variables
    device_type, created, folder = joined._join("auto", joined_world(SLURM), 10)
    os.rmdir(folder)
    assert (device_type, created) == ("cuda", True)
    assert eight_gpus == [3]  # SLURM_LOCALID, not RANK (11: an invalid ordinal on an 8-GPU node)
    assert recorders == [folder]  # the flight recorder kept, to be dumped at the run's deadline
    ((args, kwargs),) = groups
    assert args == ("nccl",)
    # longer than the run's 10 s: the run's deadline diagnoses a hang before NCCL's watchdog aborts
    assert kwargs["timeout"] == timedelta(seconds=10 + JOINED_GRACE_S)


def test_an_offloading_joined_rank_gets_a_cpu_backend_too(eight_gpus, monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    groups: list[tuple] = []
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: groups.append(a))
    monkeypatch.setattr(joined.flight_recorder, "enable", lambda folder: None)
    _, _, folder = joined._join("auto", joined_world(SLURM), 10, offloads=True)
    os.rmdir(folder)
    assert groups == [("cuda:nccl,cpu:gloo",)]


def test_an_ordinal_beyond_the_visible_gpus_is_an_error_naming_its_variable(eight_gpus, monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    world = {
        "rank": 11,
        "world_size": 16,
        "local_rank": 11,
        "local_world_size": 8,
        "local_rank_variable": "OMPI_COMM_WORLD_LOCAL_RANK",
    }
    with pytest.raises(
        RunError,
        match=r"rank 11: OMPI_COMM_WORLD_LOCAL_RANK=11 names GPU 11, but this process "
        r"sees 8 .*one visible GPU per rank",
    ) as info:
        joined._join("nccl", world, 10)
    assert info.value.rank == 11
    assert eight_gpus == []  # refused before set_device


def test_device_ordinal_problem_bounds():
    assert device_ordinal_problem(0, 1, "LOCAL_RANK") is None
    assert device_ordinal_problem(7, 8, "LOCAL_RANK") is None
    assert "SLURM_LOCALID=1 names GPU 1, but this process sees 1" in device_ordinal_problem(1, 1, "SLURM_LOCALID")
    assert device_ordinal_problem(-1, 8, "LOCAL_RANK") is not None
