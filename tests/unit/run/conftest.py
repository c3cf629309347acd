"""Fixtures of the rank-side unit tests."""

from __future__ import annotations

import pytest
import torch.distributed as dist


@pytest.fixture
def one_rank(tmp_path):
    """A real one-rank gloo process group for the test, destroyed after it."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdv'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()
