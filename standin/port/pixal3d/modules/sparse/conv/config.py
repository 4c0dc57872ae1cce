"""Stand-in of ``pixal3d.modules.sparse.conv.config``: the flex_gemm back end's settings (the real
defaults; the stand-in ``flex_gemm.ops.spconv`` records them and has one algorithm)."""
SPCONV_ALGO = 'auto'
FLEX_GEMM_ALGO = 'masked_implicit_gemm_splitk'
FLEX_GEMM_HASHMAP_RATIO = 2.0
