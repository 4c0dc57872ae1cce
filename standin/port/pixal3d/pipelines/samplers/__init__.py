from .base import Sampler  # noqa: F401
from .flow_euler import (  # noqa: F401
    FlowEulerCfgSampler,
    FlowEulerGuidanceIntervalSampler,
    FlowEulerSampler,
)
