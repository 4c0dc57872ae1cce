"""The values a person can choose for a Pixal3D run, each written once: the pipeline types and
the port's advice about them, the export profiles, the remesh resolutions, the texture sides and
the decimation limit; and the product's one default seed and texture side.

Standard library only, with no imports at all: the options table (``meshfacts/options.py``),
stageload's Pixal3D adapter and command line, and the export engine all read these figures.
"""
from __future__ import annotations

#: The port's pipeline types (``--pipeline-type``); ``plan.PLANS`` has one plan each.
PIPELINE_TYPES = ("1024_cascade", "1536_cascade")
DEFAULT_PIPELINE_TYPE = "1024_cascade"

#: Pipeline types the port itself advises against, with its advice: the run starts with a
#: ``warning`` event carrying it, the panel shows it when the type is chosen.
PIPELINE_ADVICE = {
    "1536_cascade": "1536_cascade is not recommended on a Mac: Pixal3D-mac's own notes say "
                    "\"DO NOT use --pipeline-type 1536_cascade (catastrophic shatter: 147k "
                    "connected components on M5 Max)\". Use 1024_cascade unless you are "
                    "checking that advice.",
}
PIPELINE_ADVICE_SOURCE = "Pixal3D-mac INVESTIGATION_FACTS.md §3 (commit e5fbf2d5)"

#: How a Pixal3D run computes its stages' working memory (``--working-memory``): ``lean``
#: installs ``stageload.pixal3d.lean.conditioning`` (conditioning) and
#: ``stageload.pixal3d.lean.models`` (flow attention, decoder rows) on the pipeline; ``port``
#: runs the port's own computations unchanged.
WORKING_MEMORY = ("lean", "port")
DEFAULT_WORKING_MEMORY = "lean"

#: Export profiles (``--export-profile``) beyond the port's own values (``port``, no preset):
#: ``fit`` is the low-memory export a peer validated on a 36 GB Mac (TencentARC/Pixal3D pull
#: request #35), see ``export.py``.
PROFILES = {"fit": {"remesh_resolution": 512, "free_between_steps": True}}

#: ``--remesh-resolution``: the pipeline's grid (the port's way), or ``min(512, grid)``.
REMESH_RESOLUTIONS = ("grid", 512)

#: The port's base-colour texture sides (``--texture-size``, px): the bounded export engine
#: (``bounded_export``) bakes the same sides, and the runner's options table and the add-on's
#: panel offer them from here.
TEXTURE_SIZES = (512, 1024, 2048, 4096)
#: The product's one default texture side (px), for every backend, the command line, the panel
#: and ``headless.py`` (the options table's ``texture_size``): 1024, the side the add-on has
#: always made by default. Pixal3D-mac's own default, 2048, bakes and stores four times the
#: texels (a 2048² RGBA image is 16 MiB against 4 MiB, and the built-in backend takes 2.2 s
#: against 0.8 s to texture a character at 2048 on a 2-core Linux VM).
DEFAULT_TEXTURE_SIZE = 1024
#: The product's one default seed: Pixal3D-mac's own (``generate_mps.py --seed`` 42), so a
#: Pixal3D run with the defaults draws the same noise as the port's own script; the built-in
#: backend is deterministic and does not use it.
DEFAULT_SEED = 42

#: The largest ``--decimation-target`` (faces) accepted; the port's own default is 1,000,000.
MAX_DECIMATION_TARGET = 100_000_000

#: The options a Pixal3D run shares between ``python -m stageload.pixal3d run`` and the
#: runner's ``pixal3d`` backend (the runner's options table, ``meshfacts/options.py``, reads these
#: entries; stageload may not import the runner). Each: ``name`` (argparse dest; the flag is
#: ``--`` + name with dashes), ``kind`` (``choice``, ``int``, ``size`` (bytes or ``1G``) or
#: ``switch``), ``default`` (None: not given, the port's own), ``choices``, ``low``/``high``
#: (inclusive range), ``unit``, ``metavar``, ``help`` (one line, no default), ``advice``
#: (value → warning).
#: How the models are loaded: stageload's stages, or the port's own loading (for comparison).
LOAD_MODES = ("staged", "eager")

SHARED_OPTIONS = (
    {"name": "pipeline_type", "kind": "choice", "default": DEFAULT_PIPELINE_TYPE,
     "choices": PIPELINE_TYPES, "help": "Pixal3D pipeline type", "advice": PIPELINE_ADVICE},
    {"name": "load", "kind": "choice", "default": LOAD_MODES[0], "choices": LOAD_MODES,
     "help": "staged: load each model when its stage needs it; eager: the port's own loading "
             "(for comparison)"},
    {"name": "keep_resident", "kind": "size", "default": "0", "unit": "bytes", "metavar": "SIZE",
     "help": "bytes (or a size like 1G) a model needed again later may stay loaded across "
             "stages that do not use it"},
    {"name": "prefetch", "kind": "choice", "default": "on", "choices": ("on", "off"),
     "help": "on: once a stage is ready, read the next stage's weight files ahead into the "
             "operating system's file cache (no footprint; skipped when memory is short)"},
    {"name": "working_memory", "kind": "choice", "default": DEFAULT_WORKING_MEMORY,
     "choices": WORKING_MEMORY,
     "help": "lean: the conditioning's projection at the active voxels only and NAF's "
             "output only at the pixels they read (whole, in bands, where the port needs the "
             "map), the flow model's attention and the decoders' rows in chunks "
             "(docs/pixal3d.md, Working memory); port: the port's own computations"},
    {"name": "export_profile", "kind": "choice", "default": "port",
     "choices": ("port", *PROFILES),
     "help": "fit: the low-memory export a peer validated on a 36 GB Mac (remesh at "
             "min(512, grid), free temporaries between steps); port: the port's own values"},
    {"name": "decimation_target", "kind": "int", "low": 1, "high": MAX_DECIMATION_TARGET,
     "unit": "faces", "metavar": "FACES",
     "help": "faces the port simplifies the mesh to (the port's default: 1,000,000)"},
    {"name": "remesh", "kind": "choice", "choices": ("on", "off"),
     "help": "the port's dual-contouring remesh (the port's default: on)"},
    {"name": "remesh_resolution", "kind": "choice",
     "choices": tuple(str(r) for r in REMESH_RESOLUTIONS),
     "help": "grid: remesh at the pipeline's grid (the port's way); 512: at min(512, grid), "
             "4x fewer faces into cleanup (refused where the port cannot do it)"},
    {"name": "allow_dense_grid_sample", "kind": "switch",
     "help": "export even when the port would build the dense grid-sample volume (25.8 GB at "
             "1024) because flex_gemm is missing"},
)
