"""Placeholder module: the real pipeline module imports it; the proj extractors live elsewhere."""
