from .spatial2channel import SparseChannel2Spatial  # noqa: F401
