"""The deep self-check's reduced sizes and its agreement bound.

Chosen so the three parts finish in about two minutes on an M-series Mac, the port's own path
included (its conditioning at 256² holds about 4.6 GiB and took 330 s on this project's 2-core
CPU at the real shapes, ``bench/results/2026-12-04/conditioning_memory.md``; an M-series GPU is
one to two orders faster): what the real run computes at 1024² (texture), about 21,500 tokens
(attention) and about 20,000 latent voxels (decoder), each part computes at these sizes with the
same code. Not timed on a Mac here (no Mac): the figure a Mac run gives is its report's.
"""
from __future__ import annotations

#: The texture pass's NAF output side (pixels); the extractor's own when that is smaller.
CONDITIONING_SIDE = 256
#: Active voxels of the texture pass (a shell on the extractor's grid).
CONDITIONING_VOXELS = 3000
#: Tokens of the flow step's self-attention (the real texture pass: about 21,500).
ATTENTION_TOKENS = 4096
#: The lean attention's slice: the tokens split in this many slices, so the slicing runs;
#: 512 queries a slice, a quarter of the port's 2,048-query chunk, so lean's peak stands clear
#: of the port's even in a whole-process CPU measure (17-33 against 98-131 MiB here).
ATTENTION_SLICES = 8
#: The flow model whose heads and channels shape the attention (its config JSON, no weights).
ATTENTION_MODEL = "tex_slat_flow_model_1024"
#: Side of the cube of latent voxels the decoder decodes (8³ = 512 voxels).
DECODER_SIDE = 8
#: The decoder's model and the resolution it decodes to (``1024_cascade``'s).
DECODER_MODEL, DECODER_RESOLUTION = "shape_slat_decoder", 1024
#: Rows a chunk of the decoder's widest chunked layer holds: the budget is sized from the
#: decoder's own widths so the first level's 512 rows run in 4 chunks whatever the widths (a
#: fixed byte budget fitted every MLP of the stand-in's narrow decoders in one chunk).
DECODER_CHUNK_ROWS = 128

#: The largest agreement (max |lean - port| / max |port|) a part may show: docs/pixal3d.md's
#: bound of lean against port for a whole run's sampler outputs (LEAN_BOUND).
BOUND = 1e-4
