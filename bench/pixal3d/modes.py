"""The benchmark's run modes (``bench.pixal3d.worker --mode``), in the order they alternate,
and what each runs.

eager: the port's own loading, computations and export (``--working-memory port``, the export's
working memory the port's own ``to_glb``'s, SPEC §1); staged: one stage's models at a time with
the product's defaults (``--working-memory lean``, the bounded export engine); budget: staged
with a keep-resident budget, the same defaults. Two runs come first, once each, and give the
staged modes' limit: "alone", the stages' working memory without models (the SPEC §1 share the
benchmark allocates, and the runtime baseline); "compute", the stand-in's own computations with
the staged modes' working memory, every model loaded up front so a stage's window holds no load
(what its real-architecture models take on top of their weights, measured).
"""

MODES = ("eager", "staged", "budget")
MODE_TITLES = {"eager": "eager", "staged": "staged", "budget": "staged+budget"}
#: ``--working-memory`` of each mode (``alone`` and ``compute`` measure the staged modes').
WORKING_MEMORY = {"eager": "port", "staged": "lean", "budget": "lean", "alone": "lean",
                  "compute": "lean"}
#: How each pipeline mode loads: ``eager`` every model up front (the port's ``init_pipeline``),
#: ``staged`` one stage's models at a time. ``compute`` loads up front so that no load falls
#: inside a stage's window and the window's rise over its start is the computation alone.
LOAD = {"eager": "eager", "staged": "staged", "budget": "staged", "compute": "eager"}
#: The export engine whose working memory each mode's ``export`` stage holds
#: (``bench.pixal3d.sizes.real_working_bytes``).
EXPORT_ENGINE = {"eager": "port", "staged": "bounded", "budget": "bounded", "alone": "bounded",
                 "compute": "bounded"}
#: One line per mode for the table's caption.
MODE_NOTES = {"eager": "the port's own loading, computations (--working-memory port) and "
                       "export (its to_glb)",
              "staged": "the product's defaults: staged loading, --working-memory lean, the "
                        "bounded export engine",
              "budget": "as staged, with a keep-resident budget"}
