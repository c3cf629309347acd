"""The numerics and update comparisons when the two sides live on different devices.

With ``CPUOffloadPolicy`` a rank's gradient and parameter shards are on the CPU while the
reference rows were computed on the GPU (issue 25: ``cpu_offload.yaml``'s run failed on CUDA);
CUDA refuses to subtract a CPU tensor from a CUDA one. No GPU here: ``FakeTensorMode`` makes
tensors on ``cuda`` without one and refuses mixed devices as CUDA does
(``FakeTensorDeviceMismatchError``), while a value read (``float``) is data it does not have
(``DataDependentOutputException``): a comparison that reaches the read did every tensor op on
one device."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode

from harness.run.rank.recorders.tensor_diff import max_abs_diff, on_one_device
from harness.run.rank.recorders.updates import _changed_rows

# torch 2.13 raises FakeTensorDeviceMismatchError (a RuntimeError: "found at least two devices");
# 2.11 has no such class and raises a plain RuntimeError ("found two different devices")
DEVICE_MISMATCH = r"found (at least )?two (different )?devices"


def test_the_emulation_refuses_mixed_devices_as_cuda_does():
    with FakeTensorMode():
        gpu, cpu = torch.ones(4, 3, device="cuda"), torch.ones(4, 3)
        with pytest.raises(RuntimeError, match=DEVICE_MISMATCH):
            gpu.double() - cpu.double()  # what both recorders' comparisons did before


@pytest.mark.parametrize("actual_device, expected_device", [("cpu", "cuda"), ("cuda", "cpu"), ("cuda", "cuda")])
def test_both_sides_are_brought_to_the_cpu(actual_device, expected_device):
    with FakeTensorMode():
        actual = torch.ones(4, 3, device=actual_device, dtype=torch.bfloat16)
        expected = torch.ones(4, 3, device=expected_device)
        a, e = on_one_device(actual, expected)
        assert (a.device.type, e.device.type, a.dtype, e.dtype) == ("cpu", "cpu", torch.float64, torch.float64)
        with pytest.raises(DataDependentOutputException):  # past every op, at reading the value
            max_abs_diff(actual, expected)
    assert actual.device.type == actual_device  # the inputs are left where they were


def test_changed_rows_are_on_the_cpu_whatever_the_shard_device():
    with FakeTensorMode():
        after, before = torch.ones(4, 3, device="cuda"), torch.zeros(4, 3, device="cuda")
        assert _changed_rows(after, before).device.type == "cpu"  # against the reference's rows
        empty = torch.ones(0, 3, device="cuda")  # (slicing a fake CUDA tensor needs CUDA: made empty)
        assert _changed_rows(empty, empty).device.type == "cpu"


def test_values_and_errors_of_the_comparison():
    actual = torch.tensor([[1.0, 2.0], [3.0, 5.0]], dtype=torch.float16)
    expected = torch.tensor([[1.0, 2.5], [3.0, 4.0]])
    assert max_abs_diff(actual, expected) == {"max_abs_diff": 1.0, "max_abs_ref": 4.0}
    assert max_abs_diff(actual[:0], expected[:0]) == {"max_abs_diff": 0.0, "max_abs_ref": 0.0}
    with pytest.raises(ValueError, match=r"shape \[2, 2\] is compared with the replica's \[1, 2\]"):
        max_abs_diff(actual, expected[:1], "the replica's")


def test_the_state_dict_round_trip_compares_on_one_device():
    from harness.run.rank.checkpoint import _same

    with FakeTensorMode():
        loaded, saved = torch.ones(4, 3), torch.ones(4, 3, device="cuda")  # an offloaded shard, a GPU reference
        with pytest.raises(DataDependentOutputException):  # past every op, at reading the value
            _same(loaded, saved)
    a = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    assert _same(a, a.clone()) == (True, 0.0)
    assert _same(a, a.float()) == (False, 0.0)  # same values, another dtype: not bitwise equal
    assert _same(a, torch.tensor([1.0, 3.0], dtype=torch.bfloat16)) == (False, 1.0)
