from .flow_euler import FlowEulerSampler, FlowEulerGuidanceIntervalSampler  # noqa: F401
