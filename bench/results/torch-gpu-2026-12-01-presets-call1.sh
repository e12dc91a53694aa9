#!/bin/bash
# issue 17, call 1 of 2 on the H200: tune the five models (shards side by side) against the best of the
# named modes (baseline: {presets: [...]}); stopped at its deadline, the search continues in call 2
# (run17b2.sh) from the same /tmp/tune (the machine stays warm between the calls; else from tune1.tgz).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD/.dev17:/tmp/site PYTHONUNBUFFERED=1
cd .dev17
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv; nproc; date -u;
  python3 -c "import sys,torch,triton,timm,transformers,torchvision;print(sys.version.split()[0], torch.__version__, triton.__version__, timm.__version__, transformers.__version__, torchvision.__version__)"; } > $OUT/env.txt 2>&1
T0=$(date +%s)
timeout 570 python3 bench/gpu_speedup.py --recipe recipes/torch-gpu/modes --work /tmp/tune --parallel 5 --deadline 525 --out $OUT/tune1.json > $OUT/tune1.log 2>&1
echo "tune1 exit $? wall $(( $(date +%s)-T0 )) s" >> $OUT/tune1.log
(cd /tmp && find tune -type f -size -6M ! -name '*.pt2' | tar czf $OUT/tune1.tgz -T -)
ls -la $OUT; tail -20 $OUT/tune1.log; cat $OUT/env.txt
