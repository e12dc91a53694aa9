# Sourced by the device scripts that run ONNX Runtime's CUDA EP: installs the carried wheels (.whl) into
# /tmp/site, assembles onnxruntime-gpu from its parts unless an earlier back-to-back call did, and records the
# machine in $OUT/env.txt.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
# the image's own onnxruntime (CPU) imports too: test for the GPU build's provider library itself
[ -f /tmp/site/onnxruntime/capi/libonnxruntime_providers_cuda.so ] || bash .dev/wheel/run/assemble.sh || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ nvidia-smi -L; python3 --version; nproc
  python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"; } > "$OUT/env.txt" 2>&1
