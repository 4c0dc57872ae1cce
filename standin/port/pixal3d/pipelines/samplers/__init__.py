from .flow_euler import FlowEulerGuidanceIntervalSampler, FlowEulerSampler  # noqa: F401
