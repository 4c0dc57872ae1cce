"""Stand-in of ``pixal3d.modules`` (only ``sparse`` and ``image_feature_extractor`` names)."""
from . import sparse  # noqa: F401
from . import image_feature_extractor  # noqa: F401
