from .blocks import *  # noqa: F401,F403
from .modulated import *  # noqa: F401,F403
