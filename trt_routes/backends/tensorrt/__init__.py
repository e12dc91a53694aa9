"""TensorRT 11.1+ backend (Global Performance Tuner build routes); ``tensorrt`` is imported lazily.

Registered as ``trt_routes.backends.tensorrt:TensorRTBackend``."""

from trt_routes.backends.tensorrt.backend import (
    CatalogEntrySkipped,
    TensorRTBackend,
    TensorRTBuildError,
    version_tuple,
)
from trt_routes.backends.tensorrt.catalog import (
    CatalogFormatError,
    CatalogReading,
    canonical_value,
    parse_catalog,
    parse_readback,
    parse_route_text,
    read_catalog,
    readback_differences,
    route_problems,
    route_text,
    validate_route,
    value_problem,
)
from trt_routes.backends.tensorrt.process import TensorRTDistribution, find_distribution
from trt_routes.backends.tensorrt.runner import TensorRTRunError, TensorRTRunner
from trt_routes.backends.tensorrt.settings import SETTINGS, TIMING_CACHE_MODES, check_settings

__all__ = [
    "SETTINGS",
    "TIMING_CACHE_MODES",
    "CatalogEntrySkipped",
    "CatalogFormatError",
    "CatalogReading",
    "TensorRTBackend",
    "TensorRTBuildError",
    "TensorRTDistribution",
    "TensorRTRunError",
    "TensorRTRunner",
    "canonical_value",
    "check_settings",
    "find_distribution",
    "parse_catalog",
    "parse_readback",
    "parse_route_text",
    "read_catalog",
    "readback_differences",
    "route_problems",
    "route_text",
    "validate_route",
    "value_problem",
    "version_tuple",
]
