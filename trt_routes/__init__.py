"""trt-routes: declarative, cached and auditable compiler build-route tuning."""

__all__ = ["PROTOCOL_VERSION", "__version__"]

__version__ = "0.1.0"

#: Version of the measurement protocol: bump when timing or accuracy code changes meaning.
#: 2: warm-up until timings settle (measurement.settle), then the timed repeats; noise context in meta.
#: 3: workers bound numpy's OpenBLAS pool to one thread (its idle threads spun through timed runs after
#:    a loss computation on a large output); the engine is released inside the measurement phase.
PROTOCOL_VERSION = "3"
