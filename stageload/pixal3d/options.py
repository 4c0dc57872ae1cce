"""``RunOptions``: what a Pixal3D run does, in one frozen record — how its models load and its
stages compute, and what it makes (seed, texture side, export levers).

Each default is the product's one (``meshfacts.choices``: the options a Pixal3D run shares
with the runner, whose options table reads the same entries), so the library, ``python -m
stageload.pixal3d run`` and the runner's pixal3d backend (which builds one from its job's
options) agree. The record checks what the adapter needs to be true before anything loads;
the port's own parser checks what it takes (the texture side among them) when the run starts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from meshfacts import choices
from meshfacts.units import parse_size
from stageload.pixal3d.export.run import ResolvedExport


def _shared_default(name: str):
    """The default of the shared option ``name`` (``choices.SHARED_OPTIONS``)."""
    return next(e for e in choices.SHARED_OPTIONS if e["name"] == name)["default"]


@dataclass(frozen=True)
class RunOptions:
    """A Pixal3D run's options.

    ``pipeline_type``: one of ``choices.PIPELINE_TYPES``. ``load``: ``staged`` (each model when
    its stage needs it) or ``eager`` (the port's own loading). ``keep_resident``: bytes a model
    needed again later may keep occupying across stages that do not list it (the shape decoder
    between ``shape_512`` and ``decode``); 0 keeps none. ``prefetch``: staged only: once a stage
    is ready and has loaded its own models, read the next stage's weight files ahead into the
    OS's file cache (``stageload.prefetch``). ``working_memory``: ``lean``
    (``lean.working.install``: the projection at the active voxels and NAF's output at the
    pixels they read — whole, in bands, where the port needs the map —, attention and decoder
    rows in chunks) or ``port`` (the port's own computations exactly). ``seed``: the port's
    seed. ``texture_size``: the base-colour texture side (px). ``export``: the port's export
    levers (``export.run.ResolvedExport``; the port's own by default).

    Raises ``ValueError`` naming the field for a value the adapter cannot use."""

    pipeline_type: str = choices.DEFAULT_PIPELINE_TYPE
    load: str = _shared_default("load")
    keep_resident: int = parse_size(_shared_default("keep_resident"))
    prefetch: bool = _shared_default("prefetch") == "on"
    working_memory: str = choices.DEFAULT_WORKING_MEMORY
    seed: int = choices.DEFAULT_SEED
    texture_size: int = choices.DEFAULT_TEXTURE_SIZE
    export: ResolvedExport = field(default_factory=ResolvedExport)

    def __post_init__(self):
        for name, allowed in (("pipeline_type", choices.PIPELINE_TYPES),
                              ("load", choices.LOAD_MODES),
                              ("working_memory", choices.WORKING_MEMORY)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got "
                                 f"{getattr(self, name)!r}")
        for name in ("keep_resident", "seed", "texture_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} is a whole number >= 0, got {value!r}")
        if not isinstance(self.export, ResolvedExport):
            raise ValueError("export must be a ResolvedExport (export.run.ExportOptions"
                             ".resolve())")
