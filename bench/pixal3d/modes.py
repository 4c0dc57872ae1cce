"""The benchmark's run modes (``bench.pixal3d.worker --mode``), in the order they alternate,
and what each runs.

eager: the port's own loading, computations and export (``--working-memory port``, the export's
working memory the port's own ``to_glb``'s, SPEC §1); staged: one stage's models at a time with
the product's defaults (``--working-memory lean``, the bounded export engine); budget: staged
with a keep-resident budget, the same defaults. ("alone", the stages' working memory without
models, runs once first, with the staged modes' working memory: it gives their limit.)
"""

MODES = ("eager", "staged", "budget")
MODE_TITLES = {"eager": "eager", "staged": "staged", "budget": "staged+budget"}
#: ``--working-memory`` of each mode (``alone`` measures the staged modes' working memory).
WORKING_MEMORY = {"eager": "port", "staged": "lean", "budget": "lean", "alone": "lean"}
#: The export engine whose working memory each mode's ``export`` stage holds
#: (``bench.pixal3d.sizes.real_working_bytes``).
EXPORT_ENGINE = {"eager": "port", "staged": "bounded", "budget": "bounded", "alone": "bounded"}
#: One line per mode for the table's caption.
MODE_NOTES = {"eager": "the port's own loading, computations (--working-memory port) and "
                       "export (its to_glb)",
              "staged": "the product's defaults: staged loading, --working-memory lean, the "
                        "bounded export engine",
              "budget": "as staged, with a keep-resident budget"}
