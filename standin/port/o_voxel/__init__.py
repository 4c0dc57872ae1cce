"""Stand-in of the ``o_voxel`` package the real port vendors (TRELLIS.2's, Metal build): only
``o_voxel.postprocess`` (``to_glb`` and the names it is built from) is mirrored."""
