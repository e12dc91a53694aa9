"""Knob names of TensorRT's Global Performance Tuner seen in public material (../shared/TENSORRT.md)."""

PUBLIC_KNOBS = frozenset({
    "-conv_use_long_w",
    "-kgen:codegen:cuda_tile",
    "-match_ragged_mha",
    "-copy_ppg",
    "-reshape_ppg",
    "-transpose_ppg",
    "-slice_fusion",
    "-cask_fusion:num_tactics",
    "-peep:max",
    "-conv_lowering",
    "-kgen:tiling",
})
