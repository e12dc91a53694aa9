"""Interop with trtexec and Torch-TensorRT: read their tuning caches, write trtexec command lines."""

from trt_routes.interop.trtexec import expression_for_trtexec, trtexec_command
from trt_routes.interop.tuning_cache import (
    METRICS,
    ImportedCache,
    ImportedHeader,
    ImportedRow,
    TuningCacheFormatError,
    canonical_route,
    parse_tuning_cache,
    read_partition_caches,
    read_tuning_cache,
)

__all__ = [
    "METRICS",
    "ImportedCache",
    "ImportedHeader",
    "ImportedRow",
    "TuningCacheFormatError",
    "canonical_route",
    "expression_for_trtexec",
    "parse_tuning_cache",
    "read_partition_caches",
    "read_tuning_cache",
    "trtexec_command",
]
