"""TensorRT 11.1+ backend (Global Performance Tuner build routes); ``tensorrt`` is imported lazily.

Registered as ``trt_routes.backends.tensorrt:TensorRTBackend``."""

from trt_routes.backends.tensorrt.backend import TensorRTBackend, TensorRTBuildError, version_tuple
from trt_routes.backends.tensorrt.catalog import (
    CatalogFormatError,
    parse_catalog,
    parse_route_text,
    readback_differences,
    route_problems,
    route_text,
    validate_route,
)
from trt_routes.backends.tensorrt.runner import TensorRTRunError, TensorRTRunner
from trt_routes.backends.tensorrt.settings import SETTINGS, check_settings

__all__ = [
    "SETTINGS",
    "CatalogFormatError",
    "TensorRTBackend",
    "TensorRTBuildError",
    "TensorRTRunError",
    "TensorRTRunner",
    "check_settings",
    "parse_catalog",
    "parse_route_text",
    "readback_differences",
    "route_problems",
    "route_text",
    "validate_route",
    "version_tuple",
]
