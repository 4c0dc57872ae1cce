"""Stand-in for the one ``huggingface_hub`` name the port calls: ``hf_hub_download``.

The real port (and the staged adapter, which resolves checkpoints the way the port does)
imports ``from huggingface_hub import hf_hub_download``; this package, found first because
the port folder leads ``sys.path``, answers from the local stand-in cache (``standin_hf``).
"""
from standin_hf import hf_hub_download  # noqa: F401
