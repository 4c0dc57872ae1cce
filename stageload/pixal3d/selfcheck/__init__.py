"""The deep self-check: each lean part run against the port's own path on the same inputs, on
the user's port, weights and device, at sizes small enough to finish in about two minutes on an
M-series Mac (``python -m runner check --backend pixal3d --deep``; docs/pixal3d.md, "Deep
self-check").

- :mod:`.sizes`: the reduced sizes and the agreement bound;
- :mod:`.inputs`: the inputs, made here (a picture, voxel shells, tokens, a latent), seeded;
- :mod:`.measure`: time and peak memory of a piece of work (MPS: the allocator's current and
  driver-allocated bytes; CUDA: allocated; CPU: the process's kernel peak);
- :mod:`.compare`: every tensor of two results, and how far apart they are;
- :mod:`.environment`: the back ends the port chose and the Metal packages found;
- :mod:`.parts`: the three parts — the conditioning (a texture pass at 256²), one flow step's
  attention, a decoder pass on a small latent;
- :mod:`.run`: all of it in order, one ``self_check`` event per part, and the report.
"""
