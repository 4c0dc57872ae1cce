"""Stand-in of ``flex_gemm`` (the sparse GEMM / grid-sample library the real port vendors under
``extern/mtlgemm``). Only ``flex_gemm.ops.grid_sample.grid_sample_3d`` is mirrored, because
o_voxel's ``to_glb`` imports it to sample the sparse attribute volume without a dense copy."""
