#!/bin/bash
# issue 17 knob probe, third call (bench/torch_knob_probe.py --plan extra): the settings of issue 17's list the first
# call had not tried, on the three transformers (ViT-B/16, BERT-base, GPT-2) side by side: no split / no persistent
# reductions, multi-kernel, max_fusion_size 8 and 256, no layout optimization, padding off / pad_outputs /
# force_shape_pad, cuBLASLt and fp16 accumulation (runtime), each with reduce-overhead's CUDA graphs; on top of
# max-autotune: the EXHAUSTIVE GEMM search space, Triton-only GEMM backends, no epilogue fusion. Anchors:
# reduce-overhead compiled three times and max-autotune. Compile in parallel, time serially (see the docstring).
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,memory.used --format=csv; nproc; free -g | head -2; date -u
  python3 -c "import sys,torch,triton,timm,transformers,torchvision;print('python',sys.version.split()[0],'torch',torch.__version__,'cuda',torch.version.cuda,'cudnn',torch.backends.cudnn.version(),'triton',triton.__version__,'timm',timm.__version__,'transformers',transformers.__version__,'torchvision',torchvision.__version__)"; } > $OUT/knobprobe-env.txt 2>&1
timeout 570 python3 bench/torch_knob_probe.py --plan extra --budget 555 --timing-reserve 100 --rounds 20 --iters 20 --warmup 3 --out $OUT > $OUT/knobprobe-log.txt 2>&1
echo "probe exit $?" >> $OUT/knobprobe-log.txt
{ date -u; nvidia-smi --query-gpu=clocks.sm,temperature.gpu,memory.used --format=csv; free -g | head -2; } >> $OUT/knobprobe-env.txt 2>&1
cat $OUT/knobprobe-table.md; grep -h "^\[" $OUT/knobprobe-log.txt | grep -v " ok in " | tail -25
gzip -9 $OUT/knobprobe-log.txt
