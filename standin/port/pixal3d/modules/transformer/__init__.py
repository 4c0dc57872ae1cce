"""Stand-in of ``pixal3d.modules.transformer``: the dense DiT pieces of the sparse-structure
flow."""
from .blocks import *  # noqa: F401,F403
from .modulated import *  # noqa: F401,F403
