"""STAND-IN for tests: ``cuda.bindings`` of cuda-python; only ``runtime`` is provided."""
