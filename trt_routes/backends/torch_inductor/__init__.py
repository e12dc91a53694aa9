"""PyTorch Inductor backend (``pip install 'trt-routes[torch]'``): torch is imported lazily, inside it only."""

from trt_routes.backends.torch_inductor import compile_cache
from trt_routes.backends.torch_inductor.backend import TorchInductorBackend
from trt_routes.backends.torch_inductor.models import ReferenceOverflow

__all__ = ["ReferenceOverflow", "TorchInductorBackend", "compile_cache"]
