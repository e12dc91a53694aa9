#!/bin/bash
# issue 17 knob probe on one H200 (bench/torch_knob_probe.py): does any torch.compile setting beat the best named
# mode, and how far apart are three compiles of reduce-overhead? Five models side by side compile; one at a time times.
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,memory.used --format=csv; nproc; free -g | head -2; date -u
  python3 -c "import sys,torch,triton,timm,transformers,torchvision;print('python',sys.version.split()[0],'torch',torch.__version__,'cuda',torch.version.cuda,'cudnn',torch.backends.cudnn.version(),'triton',triton.__version__,'timm',timm.__version__,'transformers',transformers.__version__,'torchvision',torchvision.__version__)"; } > $OUT/knobprobe-env.txt 2>&1
timeout 570 python3 bench/torch_knob_probe.py --budget 555 --rounds 20 --iters 20 --warmup 3 --out $OUT > $OUT/knobprobe-log.txt 2>&1
echo "probe exit $?" >> $OUT/knobprobe-log.txt
{ date -u; nvidia-smi --query-gpu=clocks.sm,temperature.gpu,memory.used --format=csv; } >> $OUT/knobprobe-env.txt 2>&1
cat $OUT/knobprobe-table.md; tail -3 $OUT/knobprobe-log.txt
