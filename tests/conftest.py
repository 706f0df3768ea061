"""Shared fixtures: every device-aware test runs on the CPU, and on CUDA when one is present."""

import os

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One test process per core (`make test`): torch's default of one thread per core in each of them, and in the
    # scripts they start, oversubscribed the cores and took half as long again.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def available_devices() -> list[str]:
    """Devices the suite runs on: always the CPU, plus CUDA where torch sees a GPU."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=available_devices())
def device(request) -> str:
    """Device string for a test that must hold on every available device."""
    return request.param
