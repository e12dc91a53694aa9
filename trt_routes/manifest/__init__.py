"""The manifest: tuning.yaml's schema and its loader."""

from trt_routes.manifest.schema import Manifest

__all__ = ["Manifest"]
