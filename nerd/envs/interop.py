"""Ordering between Warp's and torch's work on a GPU, where the two share the simulator's arrays.

Both are device-side stream waits, never host synchronisations, and no-ops on the CPU.
"""

from __future__ import annotations

import torch
import warp as wp


def torch_waits_for_warp(device: wp.Device) -> None:
    """On a GPU, make torch's current stream wait for the Warp launches issued so far (no host synchronisation)."""
    if device.is_cuda:
        wp.stream_from_torch(torch.cuda.current_stream(wp.device_to_torch(device))).wait_stream(wp.get_stream(device))


def warp_waits_for_torch(device: wp.Device) -> None:
    """On a GPU, make Warp's stream wait for torch's work issued so far (no host synchronisation)."""
    if device.is_cuda:
        wp.get_stream(device).wait_stream(wp.stream_from_torch(torch.cuda.current_stream(wp.device_to_torch(device))))
