"""Stand-in of ``pixal3d.modules`` (only ``sparse`` and ``image_feature_extractor`` names)."""
from . import (
    image_feature_extractor,  # noqa: F401
    sparse,  # noqa: F401
)
