"""STAND-IN for tests: a fake ``cuda`` package (cuda-python) whose runtime lives in ``cuda.bindings.runtime``.

Never import it outside tests; the test fixture puts ``tests/standin`` on sys.path for one test only."""
