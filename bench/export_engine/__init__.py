"""The bounded export engine's benchmark: ``python -m bench.export_engine``.

Modules, one idea each: ``cli`` (the runs and their order), ``run`` (one ``runner export`` in
its own process, measured from outside), ``quality`` (the GLB against its asset), ``model``
(the stand-in's modelled port export, a model), ``report`` (the checks and the markdown).
"""
