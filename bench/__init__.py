"""Benchmarks: scripts that measure, and write their numbers to ``bench/results/``.

Run each from the repository root as a module (no ``sys.path`` changes needed)::

    python -m bench.pixal3d --help        # eager vs staged Pixal3D stand-in (docs/benchmark.md)
    python -m bench.builtin --help        # the built-in backend's time and memory (docs/builtin.md)
    python -m bench.sampler_overhead      # the 10 Hz sampler's own CPU cost (docs/meter.md)
    python -m bench.trace_read            # time and peak memory of reading big traces
    python -m bench.matte_iou             # keyed matte's IoU with the alpha, before/after

One module (or package) per benchmark; inside ``bench.pixal3d`` one module per idea (sizes,
working memory, pipeline, traced run, analysis, summary, report), so a new measurement adds a
module and a few rows rather than editing a long script.
"""
