"""runner: the guarded out-of-process job — image in, textured GLB out (docs/runner.md).

``python -m runner IMAGE -o OUT.glb`` starts a light supervisor (no torch) that runs
``runner.worker.run`` in its own process group under ``stageload.guard`` and speaks the NDJSON event
protocol of ``runner/PROTOCOL.md`` on stdout. This package's ``__init__`` imports nothing.
"""

__version__ = "0.1.0"
