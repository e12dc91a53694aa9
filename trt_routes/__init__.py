"""trt-routes: declarative, cached and auditable compiler build-route tuning."""

__version__ = "0.1.0"

#: Version of the measurement protocol: bump when timing or accuracy code changes meaning.
PROTOCOL_VERSION = "1"
