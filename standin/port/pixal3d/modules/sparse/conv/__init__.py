from . import config  # noqa: F401
from .conv import SparseConv3d, SparseInverseConv3d  # noqa: F401
