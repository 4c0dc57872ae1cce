"""Stand-in of ``pixal3d.representations``: ``Mesh`` and ``MeshWithVoxel``."""
from .mesh.base import Mesh, MeshWithVoxel  # noqa: F401
