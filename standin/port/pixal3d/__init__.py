"""Stand-in Pixal3D-mac package for tests: the real names and control flow, tiny models.

See standin/port/README.md. Nothing here is the real Pixal3D; it mirrors the
names that ``stageload.pixal3d`` relies on (listed in that adapter's docstring).
"""
__version__ = "0.0-standin"
