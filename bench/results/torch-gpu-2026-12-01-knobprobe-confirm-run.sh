#!/bin/bash
# issue 17 knob probe, second call (bench/torch_knob_probe.py --plan confirm): the first call's CNN candidates
# (channels_last, coordinate descent over all directions) compiled twice each and combined, with freezing,
# cudnn.benchmark (own thread) and max-autotune with and without channels_last; ConvNeXt-T and ResNet-50 only.
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,memory.used --format=csv; nproc; date -u
  python3 -c "import sys,torch,triton,timm,transformers,torchvision;print('python',sys.version.split()[0],'torch',torch.__version__,'cuda',torch.version.cuda,'cudnn',torch.backends.cudnn.version(),'triton',triton.__version__,'timm',timm.__version__,'transformers',transformers.__version__,'torchvision',torchvision.__version__)"; } > $OUT/knobprobe-env.txt 2>&1
timeout 500 python3 bench/torch_knob_probe.py --plan confirm --models convnext-tiny resnet50 --budget 480 --timing-reserve 80 --rounds 20 --iters 20 --warmup 3 --out $OUT > $OUT/knobprobe-log.txt 2>&1
echo "probe exit $?" >> $OUT/knobprobe-log.txt
{ date -u; nvidia-smi --query-gpu=clocks.sm,temperature.gpu,memory.used --format=csv; } >> $OUT/knobprobe-env.txt 2>&1
cat $OUT/knobprobe-table.md; grep -h "^\[" $OUT/knobprobe-log.txt | grep -v " ok in " | tail -20
