"""``Mesh`` (vertices [V, 3] float32, faces [F, 3] int32) and ``MeshWithVoxel`` (a mesh plus
sparse PBR voxel attributes: ``coords`` [N, 3] int, ``attrs`` [N, 6] in 0..1, ``origin``,
``voxel_size``, ``layout``), the names the real pipeline's ``decode_latent`` builds."""
from __future__ import annotations

import torch


class Mesh:
    def __init__(self, vertices: torch.Tensor, faces: torch.Tensor, vertex_attrs=None):
        self.vertices = vertices
        self.faces = faces
        self.vertex_attrs = vertex_attrs
        self.fdg_coords = self.fdg_dual_vertices = None
        self.fdg_intersected = self.fdg_split_weight = None

    @property
    def device(self):
        return self.vertices.device

    def fill_holes(self):
        """The real one closes small holes with CUDA code; the stand-in surface has none."""
        return self


class MeshWithVoxel(Mesh):
    def __init__(self, vertices, faces, origin, voxel_size, coords, attrs, voxel_shape, layout):
        super().__init__(vertices, faces)
        self.origin = torch.tensor(origin, dtype=torch.float32)
        self.voxel_size = voxel_size
        self.coords = coords
        self.attrs = attrs
        self.voxel_shape = voxel_shape
        self.layout = layout
