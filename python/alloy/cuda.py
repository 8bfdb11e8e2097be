"""The CUDA backend: is a GPU there, what is it, how much memory does Alloy hold on it."""

from ._core import (
    cuda_device_arch as device_arch,
    cuda_device_count as device_count,
    cuda_device_name as device_name,
    cuda_empty_cache as empty_cache,
    cuda_is_available as is_available,
    cuda_memory_stats as memory_stats,
    cuda_stream_from_handle as stream_from_handle,
    cuda_stream_handle as stream_handle,
    cuda_synchronize as synchronize,
    cuda_unavailable_reason as unavailable_reason,
)

__all__ = [
    "device_arch", "device_count", "device_name", "empty_cache", "is_available", "memory_stats", "stream_from_handle",
    "stream_handle", "synchronize",
    "unavailable_reason",
]
