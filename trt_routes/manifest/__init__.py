"""The manifest: tuning.yaml's schema and its loader."""

from trt_routes.manifest.load import LoadedManifest, load_manifest, manifest_json_schema
from trt_routes.manifest.schema import Check, Confirm, Manifest, Tolerance

__all__ = [
    "Check", "Confirm", "LoadedManifest", "Manifest", "Tolerance", "load_manifest", "manifest_json_schema",
]
