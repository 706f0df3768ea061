"""Shared fixtures: every device-aware test runs on the CPU, and on CUDA when one is present."""

import pytest
import torch


def available_devices() -> list[str]:
    """Devices the suite runs on: always the CPU, plus CUDA where torch sees a GPU."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=available_devices())
def device(request) -> str:
    """Device string for a test that must hold on every available device."""
    return request.param
