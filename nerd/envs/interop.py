"""Ordering between Warp's and torch's work on a GPU, where the two share the simulator's arrays, and the CUDA graph
that replays a frame of both.

The waits are device-side stream waits, never host synchronisations, and no-ops on the CPU and where torch and
Warp already share one stream (inside :class:`FrameGraph`'s capture).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import warp as wp


def torch_waits_for_warp(device: wp.Device) -> None:
    """On a GPU, make torch's current stream wait for the Warp launches issued so far (no host synchronisation)."""
    if device.is_cuda:
        torch_stream, warp_stream = torch.cuda.current_stream(wp.device_to_torch(device)), wp.get_stream(device)
        if torch_stream.cuda_stream != warp_stream.cuda_stream:
            wp.stream_from_torch(torch_stream).wait_stream(warp_stream)


def warp_waits_for_torch(device: wp.Device) -> None:
    """On a GPU, make Warp's stream wait for torch's work issued so far (no host synchronisation)."""
    if device.is_cuda:
        torch_stream, warp_stream = torch.cuda.current_stream(wp.device_to_torch(device)), wp.get_stream(device)
        if torch_stream.cuda_stream != warp_stream.cuda_stream:
            warp_stream.wait_stream(wp.stream_from_torch(torch_stream))


class FrameGraph:
    """One frame of torch and Warp work, ``body``, that a GPU replays as a single CUDA graph.

    On a CUDA device the first call runs ``body`` on a side stream (it loads the Warp modules, initialises the
    libraries and caches what ``body`` gathers once) and then records it: ``torch.cuda.graph`` captures the stream,
    and Warp's launches join that capture (``wp.ScopedCapture(external=True)`` on the same stream). Every later call
    replays the recording, ordered after the Warp and torch work issued before it and before the work issued after
    it (device-side waits). Elsewhere (the CPU), or with ``enabled=False``, every call simply runs ``body``: the same
    code, uncaptured.

    What ``body`` must be for the replay to compute what running it would: it reads and writes only buffers that
    outlive the graph, in place (their addresses are recorded), never waits for the host (no ``.item()``, no
    ``bool(tensor)``, no ``nonzero``), and takes no Python branch on a value it computes. Anything that changes what
    ``body`` launches (a setting it reads, a new buffer) needs :meth:`reset` before the next call.
    """

    def __init__(self, body: Callable[[], None], device: wp.Device, enabled: bool = True):
        self.body = body
        self.device = device
        self.enabled = enabled
        self._graph: torch.cuda.CUDAGraph | None = None

    @property
    def captures(self) -> bool:
        """Whether calls replay a CUDA graph (a CUDA device and ``enabled``), rather than run ``body``."""
        return self.enabled and self.device.is_cuda

    @property
    def captured(self) -> bool:
        """Whether the graph is recorded (the next call replays it)."""
        return self._graph is not None

    def reset(self) -> None:
        """Forget the recording: the next call runs ``body`` and records it again."""
        self._graph = None

    def __call__(self) -> None:
        """Run one frame: replay the recording, or run ``body`` (the first call on a GPU also records it)."""
        if not self.captures:
            self.body()
        elif self._graph is None:
            self._record()
        else:
            torch_waits_for_warp(self.device)
            self._graph.replay()
            warp_waits_for_torch(self.device)

    def _record(self) -> None:
        """Run ``body`` once on a side stream, then record it (recording runs nothing)."""
        torch_device = wp.device_to_torch(self.device)
        caller, warp_caller = torch.cuda.current_stream(torch_device), wp.get_stream(self.device)
        side = torch.cuda.Stream(device=torch_device)
        warp_side = wp.stream_from_torch(side)
        side.wait_stream(caller)
        warp_side.wait_stream(warp_caller)
        graph = torch.cuda.CUDAGraph()
        # One stream for both libraries, so that the capture holds the order of their launches.
        with torch.cuda.stream(side), wp.ScopedStream(warp_side, sync_enter=False):
            self.body()
            with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"), \
                    wp.ScopedCapture(stream=warp_side, external=True):
                self.body()
        caller.wait_stream(side)
        warp_caller.wait_stream(warp_side)
        self._graph = graph
