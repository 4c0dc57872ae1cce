from .full_attn import *
from .modules import *
