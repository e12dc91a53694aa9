"""The manifest: tuning.yaml's schema and its loader. The loader (YAML, positions, problem reports) is
imported on first use: a worker process unpickling a task needs the schema only."""

from typing import TYPE_CHECKING, Any

from trt_routes.manifest.schema import Check, Confirm, Manifest, Tolerance

if TYPE_CHECKING:
    from trt_routes.manifest.load import LoadedManifest, load_manifest, manifest_json_schema

__all__ = [
    "Check", "Confirm", "LoadedManifest", "Manifest", "Tolerance", "load_manifest", "manifest_json_schema",
]

_LAZY = ("LoadedManifest", "load_manifest", "manifest_json_schema")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from trt_routes.manifest import load

        return getattr(load, name)
    raise AttributeError(f"module 'trt_routes.manifest' has no attribute '{name}'")
