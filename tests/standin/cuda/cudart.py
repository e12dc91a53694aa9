"""STAND-IN for tests: the pre-12.6 cuda-python import path ``cuda.cudart``, same objects as the runtime."""

from cuda.bindings.runtime import *  # noqa: F403
