"""Stand-in of ``pixal3d.pipelines``."""
from . import rembg, samplers  # noqa: F401
from .pixal3d_image_to_3d import Pixal3DImageTo3DPipeline  # noqa: F401
