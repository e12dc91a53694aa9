#!/bin/bash
# issue 17 knob probe, fourth call (bench/torch_knob_probe.py --plan extra, the settings the third call cut): the three
# transformers (ViT-B/16, BERT-base, GPT-2) side by side with reduce-overhead drawn three times and, on top of its
# CUDA graphs, triton.persistent_reductions=False, max_fusion_size=256, cuBLASLt + fp16 accumulation (all three),
# fp16 accumulation / pad_outputs / force_shape_pad (BERT), force_shape_pad (GPT-2); and on BERT alone
# max-autotune and max-autotune + max_autotune_gemm_search_space="EXHAUSTIVE", each compiled from the start by a
# helper process at nice 10 (so the cheap compiles come first on the cores), stopped at the compile deadline if not
# done. Every model times only after all have compiled AND no helper is left (compile in parallel, time serially).
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,memory.used --format=csv; nproc; free -g | head -2; date -u
  python3 -c "import sys,torch,triton,timm,transformers,torchvision;print('python',sys.version.split()[0],'torch',torch.__version__,'cuda',torch.version.cuda,'cudnn',torch.backends.cudnn.version(),'triton',triton.__version__,'timm',timm.__version__,'transformers',transformers.__version__,'torchvision',torchvision.__version__)"; } > $OUT/knobprobe-env.txt 2>&1
timeout 520 python3 bench/torch_knob_probe.py --plan extra --budget 500 --timing-reserve 75 --rounds 20 --iters 20 --warmup 3 \
  --helper-nice 10 --out $OUT --only reduce-overhead#2 reduce-overhead#3 persistent max_fusion_size_256 cublaslt+fp16 \
  bert-base/=ro+fp16_accum bert-base/pad_outputs bert-base/force_shape_pad gpt2/force_shape_pad \
  bert-base/=max-autotune bert-base/exhaustive > $OUT/knobprobe-log.txt 2>&1
echo "probe exit $?" >> $OUT/knobprobe-log.txt
{ date -u; nvidia-smi --query-gpu=clocks.sm,temperature.gpu,memory.used --format=csv; free -g | head -2; } >> $OUT/knobprobe-env.txt 2>&1
cat $OUT/knobprobe-table.md; grep -h "^\[\|^torch_knob" $OUT/knobprobe-log.txt | grep -v " ok in " | tail -25
grep -c "^AUTOTUNE" $OUT/knobprobe-log.txt; grep -oE "for [0-9]+ choices" $OUT/knobprobe-log.txt | sort | uniq -c
gzip -9 $OUT/knobprobe-log.txt
