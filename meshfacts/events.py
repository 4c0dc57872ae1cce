"""Every event the product emits: its kind, its fields and each field's type.

``runner/PROTOCOL.md`` describes the events for people; this module declares them for programs,
once. Every writer in ``runner/`` builds its events with :func:`make`; ``stageload`` (below the
runner, which it may not import) builds its own with ``stageload.events.make_event`` and the
runner checks them when it relays them (``runner.protocol.relay``); the Blender add-on loads
this file by path (``blender_addon/runner_client/facts.py``) and cleans every event it reads with
:func:`clean`.

Checking costs time on every event, so :func:`make` checks only when the environment variable
:data:`STRICT_ENV` is ``1`` (the test suite sets it for itself and every runner it starts): an
undeclared kind, a missing field, a field of the wrong type or an undeclared field then raises
:class:`SchemaError` where the event is made. A reader (:func:`clean`) never raises: it refuses
an undeclared kind and drops a field of the wrong type, naming it in a note.

Standard library only, and no import of the project: the add-on runs this file inside Blender.
Sizes are bytes (int), durations seconds (float), times ``time.time()`` seconds.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

#: The protocol version every event carries as ``"v"`` (runner/PROTOCOL.md).
PROTOCOL_VERSION = 1
#: ``1`` here makes :func:`make` (and ``runner.protocol.relay``) check every event.
STRICT_ENV = "IMAGE_TO_MESH_STRICT_EVENTS"
MAX_NUMBER = 2**63 - 1  # a signed 64-bit counter, as meshfacts.units.MAX_SIZE
MAX_NAME = 64  # characters of a sub-step's name or its parent's (the longest real one is 10)
MAX_NODE_TEXT = 255  # characters of a node's id (Ray: 56 hex digits) or host name

# Where a kind goes: the runner's stdout (and the trace), the trace only, or only the private
# pipe from the worker to the supervisor.
STDOUT, TRACE, PIPE = "stdout", "trace", "pipe"


class SchemaError(ValueError):
    """An event that does not match its declaration; the message lists every problem."""


# --------------------------------------------------------------------------- field types
@dataclass(frozen=True)
class Type:
    """A field's type: ``name`` for messages, ``test(value) -> bool``; ``nested`` for a
    record (a dict whose known keys have types of their own; other keys pass)."""
    name: str
    test: Callable[[object], bool]
    nested: Mapping[str, "Type"] | None = None

    def __call__(self, value) -> bool:
        return self.test(value)


def _is_number(x) -> bool:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    if isinstance(x, int):  # an int may be too large for a float: compare it exactly
        return abs(x) <= MAX_NUMBER
    return math.isfinite(x) and abs(x) <= MAX_NUMBER


def _is_name(x) -> bool:
    return isinstance(x, str) and 0 < len(x) <= MAX_NAME and x.isprintable()


def _is_node_text(x) -> bool:
    return isinstance(x, str) and 0 < len(x) <= MAX_NODE_TEXT and x.isprintable()


def optional(t: Type) -> Type:
    """``t`` or null."""
    return Type(f"{t.name} or null", lambda x: x is None or t.test(x), t.nested)


def record(name: str, **fields: Type) -> Type:
    """A dict whose keys ``fields`` (when present) have those types; other keys pass."""
    def test(x) -> bool:
        return isinstance(x, dict) and all(k not in x or t.test(x[k]) for k, t in fields.items())
    return Type(name, test, fields)


def list_of(t: Type) -> Type:
    """A list whose every item is a ``t``."""
    return Type(f"list of {t.name}", lambda x: isinstance(x, list) and all(map(t.test, x)))


NUMBER = Type("finite number", _is_number)
SIZE = Type("byte count", lambda x: _is_number(x) and x >= 0)
INT = Type("integer", lambda x: isinstance(x, int) and not isinstance(x, bool)
           and abs(x) <= MAX_NUMBER)
TEXT = Type("string", lambda x: isinstance(x, str))
NAME = Type(f"name (1 to {MAX_NAME} printable characters)", _is_name)
BOOL = Type("boolean", lambda x: isinstance(x, bool))
FRACTION = Type("fraction 0..1", lambda x: _is_number(x) and 0.0 <= x <= 1.0)
DICT = Type("object", lambda x: isinstance(x, dict))
TEXTS = list_of(TEXT)
DICTS = list_of(DICT)
NODE = Type("node {id, host}", lambda x: isinstance(x, dict)
            and all(_is_node_text(x.get(k)) for k in ("id", "host")))
#: a peak: bytes, or the trace summary's ``{"bytes": …, "t": …, "stage": …}``
PEAK = Type("peak (bytes or {bytes})", lambda x: SIZE.test(x)
            or (isinstance(x, dict) and SIZE.test(x.get("bytes"))))
#: the guard's ``thresholds``: condition → ``{"required": bytes, "percent": number|null}``
THRESHOLDS = Type("thresholds", lambda x: isinstance(x, dict) and all(
    isinstance(v, dict) and SIZE.test(v.get("required"))
    and (v.get("percent") is None or _is_number(v.get("percent"))) for v in x.values()))
READINGS = record("readings", **{k: optional(SIZE) for k in ("available", "total", "swap")})
SUMMARY = record("summary", peak=optional(PEAK))
ERROR_FIELDS = record("error", kind=TEXT, message=TEXT, hint=optional(TEXT),
                      exit_code=optional(INT))


# --------------------------------------------------------------------------- kinds
@dataclass(frozen=True)
class Field:
    """One field of a kind: its :class:`Type`, and whether every event of the kind has it."""
    type: Type
    required: bool = True


@dataclass(frozen=True)
class Kind:
    """One event kind: ``name``, ``stream`` (:data:`STDOUT`, :data:`TRACE` or :data:`PIPE`),
    ``fields`` (besides :data:`COMMON`) and an ``example`` event (checked by the tests)."""
    name: str
    stream: str
    fields: Mapping[str, Field]
    example: dict = field(default_factory=dict)


#: Fields any event may carry: the protocol version, the time, and in a batch the image's
#: ``item`` (1-based) and, on a cluster, its ``node``.
COMMON: dict[str, Field] = {"v": Field(INT, False), "t": Field(NUMBER),
                            "item": Field(optional(INT), False),
                            "node": Field(optional(NODE), False)}

#: kind name → :class:`Kind`, every event the product can emit (filled by :func:`declare`).
KINDS: dict[str, Kind] = {}


def declare(name: str, stream: str, required: Mapping[str, Type],
            optional_fields: Mapping[str, Type] | None = None,
            example: dict | None = None) -> Kind:
    """Declare the kind ``name`` (see :class:`Kind`): ``required`` fields every event of it
    has, ``optional_fields`` some have. Replaces an earlier declaration of that name."""
    fields = {k: Field(t) for k, t in required.items()}
    fields.update({k: Field(t, False) for k, t in (optional_fields or {}).items()})
    kind = Kind(name, stream, fields, dict(example or {}))
    KINDS[name] = kind
    return kind


def kind_of(ev: dict) -> Kind | None:
    """The declared :class:`Kind` of the event dict ``ev``, None when its ``event`` is not a
    declared name."""
    name = ev.get("event")
    return KINDS.get(name) if isinstance(name, str) else None


def problems(ev, strict_fields: bool = True) -> list[str]:
    """What is wrong with ``ev`` against its declaration ([] when nothing): not a dict, an
    undeclared kind, a missing field, a field of the wrong type, and with ``strict_fields`` a
    field its kind does not declare."""
    if not isinstance(ev, dict):
        return [f"{ev!r:.60} is not a dict"]
    kind = kind_of(ev)
    if kind is None:
        return [f"event {ev.get('event')!r} is not declared in meshfacts/events.py"]
    fields = {**COMMON, **kind.fields}
    out = [f"{kind.name}.{k} is missing" for k, f in fields.items()
           if f.required and k not in ev]
    for key, value in ev.items():
        if key == "event":
            continue
        declared = fields.get(key)
        if declared is None:
            if strict_fields:
                out.append(f"{kind.name}.{key} is not declared")
        elif not declared.type(value):
            out.append(f"{kind.name}.{key} = {_short(value)} is not a {declared.type.name}")
    return out


def check(ev: dict) -> dict:
    """``ev`` when it matches its declaration; raises :class:`SchemaError` listing every
    problem (:func:`problems`) otherwise."""
    found = problems(ev)
    if found:
        raise SchemaError("; ".join(found))
    return ev


def strict() -> bool:
    """Whether events are checked where they are made (:data:`STRICT_ENV` is ``1``)."""
    return os.environ.get(STRICT_ENV) == "1"


def make(event: str, **fields) -> dict:
    """One event: ``{"v": PROTOCOL_VERSION, "event": event, "t": time.time(), **fields}`` (a
    ``t`` in ``fields`` wins over the current time; a kind that never reaches stdout — the
    trace's and the worker pipe's own lines — has no ``"v"``, so a trace reader tells the
    lines printed on stdout by it); checked with :func:`check` when :func:`strict`, raising
    :class:`SchemaError`."""
    kind = KINDS.get(event)
    obj = {"event": event, "t": time.time()} if kind is not None and kind.stream != STDOUT \
        else {"v": PROTOCOL_VERSION, "event": event, "t": time.time()}
    obj.update(fields)
    return check(obj) if strict() else obj


def clean(ev: dict) -> tuple[dict | None, list[str]]:
    """What a reader keeps of ``ev``: None for an undeclared kind (refused, with a note), else
    ``ev`` without the fields that fail their type — inside a record only the failing keys —
    and a note for each one dropped (``"memory.footprint = 'abc' is not valid; ignored"``).
    Undeclared fields and missing ones pass (a reader copes with both). Never raises."""
    kind = kind_of(ev)
    if kind is None:
        return None, [f"event {_short(ev.get('event'))} is not one this add-on knows; ignored"]
    notes: list[str] = []
    out = _clean(ev, {k: f.type for k, f in {**COMMON, **kind.fields}.items()}, kind.name,
                 notes)
    return out, notes


def _clean(obj: dict, types: Mapping[str, Type], where: str, notes: list[str]) -> dict:
    out = dict(obj)
    for key, t in types.items():
        if key not in out:
            continue
        value = out[key]
        if t.nested is not None and isinstance(value, dict):
            out[key] = _clean(value, t.nested, f"{where}.{key}", notes)
        elif not t(value):
            notes.append(f"{where}.{key} = {_short(out.pop(key))} is not valid; ignored")
    return out


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"



# --------------------------------------------------------------------------- declarations
# In runner/PROTOCOL.md's order. Types follow what the writers send; where a reader has always
# accepted null (a figure not known), the type is optional(...) for the writers too.
_OPT_TEXT, _OPT_INT, _OPT_SIZE, _OPT_NUMBER = (optional(TEXT), optional(INT), optional(SIZE),
                                               optional(NUMBER))
_ERROR = {"kind": TEXT, "message": TEXT, "hint": _OPT_TEXT, "exit_code": INT}
_ERROR_MORE = {"details": DICT, "trace": _OPT_TEXT, "seconds": NUMBER, "warnings": DICTS}
_WORKER = {"state": TEXT, "pid": INT, "python": TEXT, "torch": _OPT_TEXT}
_WORKER_DONE = {"output": TEXT, "info": DICT}
_EXIT = {"pid": INT, "code": _OPT_INT}

declare("hello", STDOUT,
        {"runner": TEXT, "pid": _OPT_INT, "backend": _OPT_TEXT, "image": _OPT_TEXT,
         "output": _OPT_TEXT, "trace": _OPT_TEXT, "stages": TEXTS},
        {"mode": TEXT, "python": TEXT, "input_dir": TEXT, "output_dir": TEXT,
         "manifest": TEXT, "asset": TEXT, "sha256": _OPT_TEXT, "options": DICT},
        {"runner": "0.1.0", "pid": 41, "mode": "single", "backend": "builtin",
         "image": "/a/goblin.png", "output": "/a/goblin.glb", "trace": "/a/goblin.trace.jsonl",
         "stages": ["matte", "shape", "texture", "export"], "python": "/x/python"})
declare("asset", STDOUT,
        {"path": TEXT, "bytes": SIZE, "faces": INT, "vertices": INT, "voxels": INT,
         "predicted_peak": SIZE}, None,
        {"path": "/a/goblin.asset.npz", "bytes": 210000000, "faces": 7900000,
         "vertices": 3950000, "voxels": 10100000, "predicted_peak": 2638670844})
declare("input", STDOUT,
        {"path": TEXT, "format": _OPT_TEXT, "mode": TEXT, "width": INT, "height": INT,
         "frames": INT, "had_alpha": BOOL, "orientation": INT, "bytes": SIZE, "notes": TEXTS},
        None,
        {"path": "/a/goblin.jpg", "format": "JPEG", "mode": "CMYK", "width": 480, "height": 640,
         "frames": 1, "had_alpha": False, "orientation": 6, "bytes": 71005,
         "notes": ["EXIF orientation 6 applied", "converted from CMYK"]})
declare("guard", STDOUT,
        {"state": TEXT, "reason": _OPT_TEXT, "readings": READINGS},
        {"thresholds": optional(THRESHOLDS), "exit_code": INT, "by": TEXT},
        {"state": "waiting", "reason": "available 31 % < 40 %",
         "readings": {"available": 7700000000, "total": 25000000000, "swap": 0},
         "thresholds": {"wait_free": {"required": 10000000000, "percent": 40}}})
# A sub-step (``parent`` set) has its own index and count among its parent's, except the
# export process's ``handover``, which precedes the numbered ones.
declare("stage", STDOUT,
        {"stage": TEXT},
        {"index": INT, "count": _OPT_INT, "parent": NAME, "pid": INT,
         # the bounded export's decimate step: how it decimates (bounded_export)
         "method": TEXT, "pieces": INT},
        {"stage": "shape", "index": 1, "count": 4, "pid": 42})
declare("ready", STDOUT, {"stage": TEXT, "seconds": NUMBER, "released_bytes": SIZE}, None,
        {"stage": "shape", "seconds": 0.1, "released_bytes": 0})
_LOAD = {"model": TEXT, "stage": _OPT_TEXT, "bytes": _OPT_SIZE, "seconds": NUMBER,
         "outside_stage": BOOL}
_LOAD_EXAMPLE = {"model": "shape_slat_decoder", "stage": "shape_512", "bytes": 900000000,
                 "seconds": 1.4, "outside_stage": False, "prefetched": False}
# a Pixal3D pipeline model's load also says how it was loaded (stageload.pixal3d.build.direct)
_LOAD_MORE = {"prefetched": BOOL, "method": TEXT, "fallback": TEXT}
declare("load", STDOUT, _LOAD, _LOAD_MORE, _LOAD_EXAMPLE)
declare("reload", STDOUT, _LOAD, _LOAD_MORE, _LOAD_EXAMPLE)
declare("release", STDOUT,
        {"model": TEXT, "stage": _OPT_TEXT, "bytes": _OPT_SIZE, "seconds": NUMBER},
        {"reason": TEXT},
        {"model": "tex_slat_flow_model_1024", "stage": "decode", "bytes": 2600000000,
         "seconds": 0.2})
declare("prefetch", STDOUT,
        {"model": TEXT, "stage": _OPT_TEXT, "for_stage": _OPT_TEXT, "bytes": SIZE,
         "file_bytes": SIZE, "seconds": NUMBER, "state": TEXT, "reason": _OPT_TEXT,
         "method": TEXT}, None,
        {"model": "shape_slat_decoder", "stage": "structure", "for_stage": "shape_512",
         "bytes": 900000000, "file_bytes": 900000000, "seconds": 0.02, "state": "done",
         "reason": None, "method": "read"})
declare("progress", STDOUT,
        {"stage": _OPT_TEXT, "fraction": FRACTION},
        {"step": INT, "steps": INT, "substep": optional(NAME), "substep_fraction": FRACTION,
         "pieces": INT, "piece": INT, "facts": DICT},
        {"stage": "export", "fraction": 0.5, "substep": "bake", "substep_fraction": 0.25})
declare("warning", STDOUT,
        {"message": TEXT},
        {"source": _OPT_TEXT, "fallback": TEXT, "cause": TEXT, "differs": TEXT, "model": TEXT,
         "kind": TEXT, "coverage": FRACTION},
        {"message": "The export fell back (geometry_only): out of memory; the GLB is untextured.",
         "source": "stageload.pixal3d", "fallback": "geometry_only",
         "cause": "out of memory", "differs": "untextured"})
declare("memory", STDOUT,
        {k: _OPT_SIZE for k in ("footprint", "peak", "stage_peak", "swap", "available",
                                "total")} | {"stage": _OPT_TEXT},
        {"substep": optional(NAME), "pressure": _OPT_NUMBER},
        {"footprint": 512000000, "peak": 600000000, "stage": "shape", "stage_peak": 550000000,
         "substep": None, "swap": 0, "available": 20000000000, "total": 25000000000,
         "pressure": None})
# the allocator's own figures after a stage, sub-step or ready (stageload/gpu.py): MPS
# current/driver, CUDA allocated/peak
declare("gpu", STDOUT, {"device": TEXT},
        {"current": _OPT_SIZE, "driver": _OPT_SIZE, "allocated": _OPT_SIZE, "peak": _OPT_SIZE,
         "stage": _OPT_TEXT, "parent": optional(NAME)},
        {"device": "mps", "current": 1000, "driver": 2000, "stage": "sampling",
         "parent": "texture"})
declare("working_memory", STDOUT,
        {"stage": _OPT_TEXT, "target": TEXT, "tool": TEXT, "chunk": _OPT_INT,
         "bytes_saved": SIZE, "note": _OPT_TEXT}, None,
        {"stage": "decode", "target": "naf.upsample", "tool": "banded_upsampler",
         "chunk": 4096, "bytes_saved": 1500000000, "note": None})
declare("stalled", STDOUT,
        {"pid": _OPT_INT, "why": TEXT, "seconds": _OPT_NUMBER, "reason": _OPT_TEXT}, None,
        {"pid": 42, "why": "stopped", "seconds": 10.2,
         "reason": "the process (pid 42) is stopped (state T: SIGSTOP or a debugger)"})
declare("resumed", STDOUT, {"pid": _OPT_INT, "why": TEXT, "seconds": _OPT_NUMBER}, None,
        {"pid": 42, "why": "stopped", "seconds": 25.0})
declare("result", STDOUT,
        {"output": TEXT, "trace": _OPT_TEXT, "seconds": _OPT_NUMBER,
         "summary": optional(SUMMARY), "peak": optional(PEAK)},
        {"backend": _OPT_TEXT, "info": DICT, "trace_error": TEXT, "warnings": DICTS},
        {"output": "/a/goblin.glb", "trace": "/a/goblin.trace.jsonl", "seconds": 7.9,
         "summary": {"peak": {"bytes": 600000000, "t": 8.0, "stage": "shape"}},
         "peak": 600000000, "backend": "builtin", "info": {"faces": 4000}})
declare("error", STDOUT, _ERROR, _ERROR_MORE,
        {"kind": "not_an_image", "message": "notes.txt is not an image Pillow can read.",
         "hint": "Choose a PNG, JPEG or WebP file.", "exit_code": 10})
declare("batch_item", STDOUT,
        {"index": INT, "count": INT, "image": TEXT, "status": TEXT, "output": _OPT_TEXT,
         "error": optional(ERROR_FIELDS)},
        {"trace": _OPT_TEXT, "seconds": _OPT_NUMBER, "peak": _OPT_SIZE, "warnings": DICTS,
         "retries": DICTS},
        {"index": 2, "count": 9, "image": "/in/broken.png", "status": "failed", "output": None,
         "trace": None, "seconds": 0.1, "peak": None,
         "error": {"kind": "not_an_image", "message": "broken.png is not an image Pillow can "
                   "read.", "hint": "Choose a PNG, JPEG or WebP file.", "exit_code": 10}})
declare("placed", STDOUT,
        {"item": INT, "image": TEXT, "node": NODE, "attempt": _OPT_INT, "pid": _OPT_INT}, None,
        {"item": 3, "image": "/in/orc.png", "node": {"id": "ddf92bf0", "host": "mac-2"},
         "attempt": 1, "pid": 24153})
declare("batch_done", STDOUT,
        {"done": INT, "failed": INT, "skipped": INT, "count": _OPT_INT,
         "manifest": _OPT_TEXT},
        {"seconds": NUMBER},
        {"done": 8, "failed": 1, "skipped": 0, "count": 9, "manifest": "/out/manifest.json",
         "seconds": 58.2})
# ``check --deep``: one per part of the pixal3d backend's self-check (stageload.pixal3d.selfcheck)
_PATH_FIGURES = record("path figures", seconds=NUMBER, memory=DICT)
declare("self_check", STDOUT,
        {"part": TEXT, "status": TEXT, "ok": optional(BOOL), "bound": NUMBER,
         "memory_measured": TEXT, "said": TEXTS},
        {"size": _OPT_TEXT, "agreement": _OPT_NUMBER, "port": optional(_PATH_FIGURES),
         "lean": optional(_PATH_FIGURES), "note": _OPT_TEXT},
        {"part": "conditioning", "status": "agrees", "ok": True, "bound": 0.0001,
         "size": "texture pass, NAF output 256x256 (a real run: 1024x1024), 3,000 active "
                 "voxels on its 64^3 grid", "agreement": 4.4e-08,
         "port": {"seconds": 3.2, "memory": {"mps_current": 4900000000,
                                             "mps_driver": 5200000000}},
         "lean": {"seconds": 2.9, "memory": {"mps_current": 1200000000,
                                             "mps_driver": 1500000000}},
         "note": None, "memory_measured": "MPS: the allocator's current and driver-allocated "
                                          "bytes, peak over the part's start (read every 5 ms)",
         "said": ["sampled_projection on image_cond_model_tex_1024.conditioning: projection at "
                  "the active voxels; NAF at the pixels their samples read"]})
declare("check", STDOUT,
        {"requested": TEXTS, "ok": BOOL},
        {"python": DICT, "platform": DICT, "torch": DICT, "devices": DICT, "backends": DICT,
         "cluster": DICT, "deep": DICT},
        {"python": {"version": "3.11.7", "executable": "/x/python"},
         "torch": {"version": "2.13.0", "ok": True}, "devices": {"cpu": {"available": True}},
         "backends": {"builtin": {"ok": True, "reason": None, "hint": None}},
         "requested": ["builtin"], "ok": True})
# The trace's own lines: the meter's samples and the worker's (or export process's) private
# events, renamed ``<process>_<event>`` when traced (runner/job/child.py).
declare("sample", TRACE,
        {"pid": INT, "footprint": _OPT_SIZE},
        {"hwm": _OPT_SIZE, "hwm_since": _OPT_NUMBER, "available": _OPT_SIZE,
         "total": _OPT_SIZE, "swap": _OPT_SIZE, "pressure": _OPT_NUMBER},
        {"pid": 42, "footprint": 512000000, "hwm": 600000000, "hwm_since": 1.0,
         "available": 20000000000, "total": 25000000000, "swap": 0, "pressure": None})
for _process in ("worker", "export"):
    _prefix = "" if _process == "worker" else "export_"
    declare(f"{_prefix}worker", TRACE, _WORKER, None,
            {"state": "started", "pid": 42, "python": "/x/python", "torch": None})
    declare(f"{_prefix}worker_done", TRACE, _WORKER_DONE, None,
            {"output": "/a/goblin.glb", "info": {}})
    declare(f"{_process}_error", TRACE, _ERROR, _ERROR_MORE,
            {"kind": "empty_matte", "message": "No character found.", "hint": "Use another "
             "image.", "exit_code": 43})
    declare(f"{_process}_exit", TRACE, _EXIT, None, {"pid": 42, "code": 0})
# The worker's answer to ``runner.commands.check`` over its pipe; never on stdout or in a trace.
declare("probe", PIPE, {"python": DICT, "platform": DICT, "torch": DICT, "devices": DICT,
                        "backends": DICT}, None,
        {"python": {"version": "3.11.7"}, "platform": {"system": "Linux"},
         "torch": {"version": None, "ok": False}, "devices": {"cpu": {"available": True}},
         "backends": {}})
# The worker's deep self-check report (``check --deep``) after its ``self_check`` events.
declare("self_check_done", PIPE,
        {"ok": BOOL, "device": TEXT, "mps": DICT, "port": DICT, "backends": DICT,
         "metal": DICTS, "unchecked": TEXTS, "bound": NUMBER, "seconds": NUMBER},
        {"torch": _OPT_TEXT, "pipeline_type": TEXT},
        {"ok": True, "device": "mps", "torch": "2.13.0",
         "mps": {"available": True, "built": True, "used": True, "why": None},
         "port": {"root": "/Users/me/Pixal3D-mac", "version": {"git": "0be9e69a"}},
         "pipeline_type": "1024_cascade",
         "backends": {"attention": "naive", "convolution": "flex_gemm", "environment": {}},
         "metal": [{"module": "mtlflashattn", "package": "mtlflashattn", "found": False,
                    "effect": "the port's sparse attention runs naive"}],
         "unchecked": [], "bound": 0.0001, "seconds": 71.5})
