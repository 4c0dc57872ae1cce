from .BiRefNet import BiRefNet  # noqa: F401
