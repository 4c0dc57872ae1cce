from .full_attn import *  # noqa: F401,F403
from .modules import *  # noqa: F401,F403
from .proj_attention import *  # noqa: F401,F403
from .rope import *  # noqa: F401,F403
