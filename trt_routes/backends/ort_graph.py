"""What an ONNX Runtime build writes and says: the optimized model made self-contained (its external data
embedded), its op counts, and the warnings and transformers of ORT's log."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from trt_routes.files.model_files import external_path, onnx_tensors

_MODIFIED = re.compile(r"GraphTransformer (\S+) modified: (\d+)")


def summarize_log(lines: list[str]) -> list[str]:
    """Warnings and errors as ORT wrote them, plus which transformers changed the graph."""
    kept = [line for line in lines if "[W:" in line or "[E:" in line or "[F:" in line]
    applied = sorted({m.group(1) for line in lines if (m := _MODIFIED.search(line)) and m.group(2) != "0"})
    return [*kept, f"transformers that modified the graph: {', '.join(applied) or 'none'}"]


def op_counts(path: Path) -> str:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    counts = Counter(f"{n.domain + ':' if n.domain else ''}{n.op_type}" for n in model.graph.node)
    return ", ".join(f"{op} x{count}" for op, count in sorted(counts.items()))


def embed_external_data(engine_path: Path, model_dir: Path) -> int:
    """Make the optimized model at ``engine_path`` self-contained; returns how many tensors it embedded.

    ORT's optimized model keeps the source model's external-data references (``model.onnx.data``,
    relative to the source's folder), so the engine would not load from the blob store or anywhere else.
    Their bytes are read from ``model_dir`` and written into the engine (protobuf's 2 GiB limit applies)."""
    import onnx

    model = onnx.load(str(engine_path), load_external_data=False)
    external = [t for t in onnx_tensors(model.graph) if t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return 0
    for tensor in external:  # read here: onnx's own loader refuses hard-linked files (DVC caches, Ray nodes)
        info = {e.key: e.value for e in tensor.external_data}
        with open(model_dir / external_path(info.get("location", "")), "rb") as f:
            f.seek(int(info.get("offset") or 0))
            tensor.raw_data = f.read(int(info["length"])) if info.get("length") else f.read()
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]
    if model.ByteSize() >= 2**31:
        raise RuntimeError(f"the optimized model of {model_dir} is 2 GiB or more with its weights: "
                           "the onnxruntime backend stores engines as one self-contained file")
    engine_path.write_bytes(model.SerializeToString())
    return len(external)
