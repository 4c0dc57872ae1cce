"""Pieces shared by the stand-in models: the ballast weight (the decoders' size in bytes)."""
from standin_hf import add_ballast, ballast  # noqa: F401  (re-exported for the model modules)
