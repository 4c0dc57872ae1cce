"""Stand-in of ``pixal3d.modules.attention``: dense attention (the sparse-structure flow)."""
from .full_attn import *  # noqa: F401,F403
from .modules import *  # noqa: F401,F403
from .proj_attention import ProjectAttention  # noqa: F401
from .rope import *  # noqa: F401,F403
