"""Generate the two small, real ONNX models of the quickstart (opset 17, seeded weights).

Run ``python recipes/quickstart/make_models.py [FOLDER]``; the output is byte-for-byte deterministic. The
generator lives in the package (``trt_routes.examples.make_models``, so that ``trt-routes init --example``
works from a wheel); this file is its entry point in the repository."""

from __future__ import annotations

import sys
from pathlib import Path

from trt_routes.examples.make_models import BUILDERS, build_resnet_like, build_transformer_block, main, write_models

__all__ = ["BUILDERS", "build_resnet_like", "build_transformer_block", "main", "write_models"]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or [str(Path(__file__).resolve().parent)]))  # default: next to this file
