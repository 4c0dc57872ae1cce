"""The eager-vs-staged benchmark of the Pixal3D stand-in: ``python -m bench.pixal3d``.

Modules: ``cli`` (the command: options, the runs in order), ``modes`` (eager/staged/budget),
``sizes`` (the real pipeline's sizes and the stage plan), ``working`` (per-stage working
memory), ``pipeline`` (the stand-in port under each mode, in the worker), ``worker`` (one
measured process), ``run`` (a worker under the guard, sampled from outside, into a trace),
``disk`` (cold reads, page-cache eviction), ``analysis`` (numbers from one trace), ``summary``
(``summary.json``), ``report`` (markdown tables; ``python -m bench.pixal3d.report``).
Importing this package imports nothing heavy (no torch).
"""
