from .base import Mesh, MeshWithVoxel  # noqa: F401
