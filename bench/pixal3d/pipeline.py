"""The stand-in Pixal3D port under the benchmark's three loading modes, with per-stage working
memory.

- ``write_weights(work, scale)`` (parent process): the stand-in's own writer
  (``standin/port/make_weights.py``) at ``scale`` of the real sizes; real
  safetensors files on disk.
- ``run(args, working, emit)`` (worker process): ``stageload.pixal3d.Pixal3DRun`` on the
  stand-in port, on the CPU, ``load="eager"`` (the port's own ``init_pipeline``: every model up
  front, four backbones, three NAFs, ``low_vram`` as the port sets it; ``working_memory="port"``)
  or ``load="staged"`` (``keep_resident=0``, or ``--budget`` bytes for the budget mode;
  ``working_memory="lean"``, the product's default: ``modes.WORKING_MEMORY``), one image
  through the port's own ``run()``; eager exports with the port's own export, the staged modes
  hand the asset over as the product's bounded export does (``modes.EXPORT_ENGINE``). The
  ``compute`` mode loads eagerly with the staged modes' working memory and export, and waits
  ``--hold`` seconds after each stage so the next one's start is sampled (``modes.LOAD``).

Working memory: the stand-in's stages use almost none, so ``WorkingMemory`` adds each stage's
scaled share (SPEC §1, see ``bench.pixal3d.sizes``). It is allocated at the *end* of each
stage, after the stage's models are loaded and used (where the real port's activations live),
held ``--hold`` seconds, and freed — by a per-instance ``on_call`` hook on the adapter's
``enter`` (which every stage change goes through), i.e. before the next stage's ``stage``
event, inside the ending stage's memory window. The export stage's share is allocated after
``generate`` returns, still inside the export window. Neither the adapter nor the stand-in is
edited.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Optional

from standin import (
    PORT_DIR as STANDIN,  # the stand-in port folder (standin/, at the repository root)
)


def weights_fingerprint(scale: float, port_dir: Path = Path(STANDIN)) -> str:
    """SHA-256 of what a written weights folder depends on: the stand-in port's Python sources
    (``port_dir/**/*.py`` in path order, names and bytes: the writer ``make_weights.py``, the
    flow and decoder configs, the model classes), ``scale`` and the torch version (whose
    random streams draw the weights). A folder recorded with another fingerprint is written
    again: weights kept from other sources would be measured silently, or loaded into the
    wrong classes."""
    import torch

    digest = hashlib.sha256(f"scale={scale!r} torch={torch.__version__}\n".encode())
    for path in sorted(Path(port_dir).rglob("*.py")):
        digest.update(str(path.relative_to(port_dir)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cached_weights(root: Path, fingerprint: str) -> tuple[Optional[dict], str]:
    """``(record, why)``: the ``weights.json`` record under ``root`` when it can be reused
    (same ``fingerprint``, every file present), else ``(None, the reason to write)``."""
    record = Path(root) / "weights.json"
    if not record.is_file():
        return None, "no weights written there yet"
    try:
        info = json.loads(record.read_text())
    except (OSError, ValueError) as exc:
        return None, f"its weights.json is unreadable ({exc})"
    if info.get("fingerprint") != fingerprint:
        return None, ("written by other stand-in sources, scale or torch (fingerprint "
                      f"{str(info.get('fingerprint'))[:12]}, now {fingerprint[:12]})")
    missing = [f for f in info.get("files", []) if not Path(f).is_file()]
    if missing or "model_dir" not in info:
        return None, f"files missing ({missing[0] if missing else 'model_dir'})"
    return info, f"reused: fingerprint {fingerprint[:12]} unchanged"


def write_weights(work: Path, scale: float, fingerprint: Optional[str] = None) -> dict:
    """Write (or reuse) the stand-in weights at ``scale`` under ``work/scale_<scale>``.

    Returns ``{"root": Path, "env": {HF_HOME, TORCH_HOME}, "model_dir": Path (the
    Pixal3D repository's snapshot folder), "files": [weight files: safetensors, MoGe's .pt],
    "model_bytes": {plan model name: bytes as written}, "plan": {stage: [models]},
    "written_bytes": {stand-in key: bytes}, "fingerprint": str, "cache": what was done and
    why}``. A folder whose ``weights.json`` records the same fingerprint (default
    :func:`weights_fingerprint` of ``scale``) is reused (the files are deterministic: seed 0);
    any other is written again. Raises ``ValueError`` for a scale outside (0, 1].
    """
    from . import sizes

    root = Path(work) / f"scale_{scale:g}"
    fingerprint = fingerprint or weights_fingerprint(scale)
    info, why = cached_weights(root, fingerprint)
    if info is None:
        why = f"written: {why}"
        written = sizes.make_weights.make_weights(root, scale=scale)
        files = sorted(str(p) for p in root.rglob("*") if p.suffix in (".safetensors", ".pt"))
        info = {"scale": scale, "fingerprint": fingerprint, "env": written.env, "files": files,
                "written_bytes": written.bytes, "model_dir": str(written.model_dir)}
        (root / "weights.json").write_text(json.dumps(info, indent=1))
    model_bytes = {name: int(info["written_bytes"][sizes.STANDIN_KEY.get(name, name)])
                   for name in sizes.REAL_WEIGHT_BYTES}
    return {"root": root, "env": info["env"], "model_dir": Path(info["model_dir"]),
            "files": [Path(f) for f in info["files"]],
            "model_bytes": model_bytes, "written_bytes": info["written_bytes"],
            "plan": {stage: list(models) for stage, models in sizes.REAL_PLAN.items()},
            "fingerprint": fingerprint, "cache": why}


def open_port_only(args) -> dict:
    """What the "alone" process imports and runs besides torch, so its runtime baseline matches
    the staged modes': the adapter and the stand-in port's modules (``open_port`` loads no
    weights), and ``stageload.pixal3d.build.direct.prepare_meta_runtime()`` — the same call the
    adapter makes in a staged run's ``setup`` (the one-time ``torch._dynamo`` import the first
    meta-device initialiser triggers, ~70 MB). Returns that call's cost as
    ``{"seconds", "modules", "rss_bytes"}``."""
    from stageload.pixal3d import open_port
    from stageload.pixal3d.build.direct import prepare_meta_runtime

    if args.weights:
        env = json.loads((Path(args.weights) / "weights.json").read_text())["env"]
        os.environ.update(env)
    open_port(STANDIN)
    note = prepare_meta_runtime()
    return {"seconds": note.seconds, "modules": note.modules, "rss_bytes": note.rss_bytes}


def top_stage(event: dict):
    """The stage a ``stage`` event enters, or None: for other events and for sub-steps (a
    ``stage`` event with a ``parent``, e.g. the export's ``write``), which stay inside their
    parent stage — the product writes them so (runner/PROTOCOL.md)."""
    if event.get("event") != "stage" or event.get("parent") is not None:
        return None
    return event.get("stage")


def run(args, working, emit) -> dict:
    """One image through the stand-in port in ``args.mode`` (eager / staged / budget).

    ``working``: a ``WorkingMemory``; ``emit``: the event sink (stdout JSON lines). Emits a
    final ``bench_done`` event with the adapter's own figures (resident bytes per stage, models
    kept across gaps, backbone/NAF sharing) and returns the same dict.
    """
    from stageload import make_event, on_call
    from stageload.pixal3d import Pixal3DRun, RunOptions

    from .modes import EXPORT_ENGINE, LOAD, WORKING_MEMORY
    from .report import COPIES_MIN_BYTES

    env = json.loads((Path(args.weights) / "weights.json").read_text())["env"]
    os.environ.update(env)  # HF_HOME / TORCH_HOME: where the stand-in port finds its weights
    # Here export's working memory is WorkingMemory's share (SPEC §1's figure); the stand-in's
    # own model of the export drivers is measured by bench.pixal3d.export instead.
    os.environ.setdefault("PIXAL3D_STANDIN_EXPORT_SCALE", "0")
    load = LOAD[args.mode]
    keep = int(args.budget) if args.mode == "budget" else 0
    current = {"stage": None}

    pause = float(getattr(args, "load_pause", 0.0) or 0.0)

    def sink(event: dict) -> None:
        stage = top_stage(event)
        if stage is not None:
            current["stage"] = stage
        emit(event)
        if pause and event.get("event") in ("load", "reload") \
                and int(event.get("bytes") or 0) >= COPIES_MIN_BYTES:
            # The load event is written as the load returns, and a stage computes at once (the
            # structure flow's first step follows its load within a millisecond): without a
            # pause the load check's tail (one sampling interval) reads that step's memory too.
            time.sleep(pause)

    options = RunOptions(load=load, keep_resident=keep, seed=42, texture_size=512,
                         prefetch=getattr(args, "prefetch", "on") == "on",
                         working_memory=WORKING_MEMORY[args.mode])
    # compute: the meta-device setup a staged run's adapter makes in setup and eager loading
    # never makes, so both carry the same runtime (analysis.compute_working reads it per stage)
    note = None
    if args.mode == "compute":
        from stageload.pixal3d.build.direct import prepare_meta_runtime
        note = prepare_meta_runtime()
    pipeline = Pixal3DRun(STANDIN, options, device="cpu", events=sink)
    note = pipeline.runtime_note or note
    if note is not None:
        emit(make_event("bench_runtime", seconds=note.seconds, modules=note.modules,
                        rss_bytes=note.rss_bytes))
    if args.mode == "compute":
        # Every weight resident before the first stage: a weight first touched inside a stage
        # would count in that stage's rise (and lower the runtime read at the stages before it).
        for module in pipeline.eager_modules():
            _touch_all(module)

    def stage_end(*_args, **_kwargs) -> None:
        # The stage from the events, not pipeline.stage: closing the staged models during
        # export resets the latter to None while the export window is still open.
        if current["stage"] is not None:
            working.allocate(current["stage"])
            working.finish()
            if args.mode == "compute":
                # the next stage's start with this stage's buffer freed, sampled from outside
                # for --hold seconds (analysis.compute_working takes its least footprint)
                emit({"event": "bench_idle", "t": time.time(), "after": current["stage"],
                      "resident_bytes": pipeline.loaded_bytes()})
                time.sleep(working.hold)

    hook = on_call(pipeline, "enter", before=stage_end)
    with tempfile.TemporaryDirectory(prefix="pixal3d-bench-") as tmp:
        # The bounded export (the product's default): the model process hands the decoded
        # asset over and the engine exports it in a process of its own; here the export stage
        # holds that engine's measured peak (its working share) once the models are released.
        handover = Path(tmp) / "asset.npz" if EXPORT_ENGINE[args.mode] == "bounded" else None
        result = pipeline.generate(args.image, Path(tmp) / "out.glb", steps=args.steps,
                                   handover=handover)
        if handover is not None:
            pipeline.enter("export")
        stage_end()  # export's working memory, inside the export window
        out = Path(tmp) / "out.glb"
        glb_sha256 = hashlib.sha256(out.read_bytes()).hexdigest() if out.is_file() else None
        asset_sha256 = hashlib.sha256(handover.read_bytes()).hexdigest() \
            if handover is not None and handover.is_file() else None
    hook.remove()
    pipeline.close()
    from stageload.pixal3d.plan import STAGES
    working.check(STAGES)  # a stage whose share was never allocated fails the benchmark
    done = make_event("bench_done", mode=args.mode, load=load, keep_resident=keep,
                      working_memory=pipeline.working_memory_mode,
                      working_memory_installed=list(pipeline.working_memory.installed),
                      resident_bytes=result["resident_bytes"], kept=result["kept"],
                      share_stats=pipeline.share_stats, vertices=result["vertices"],
                      faces=result["faces"], seconds=result["seconds"],
                      latents_sha256=_sha256_of_latents(pipeline), glb_sha256=glb_sha256,
                      asset_sha256=asset_sha256)
    emit(done)
    return done


def _sha256_of_latents(pipeline) -> str | None:
    """SHA-256 over every sampler output the run kept (``last_latents``: tensors, or sparse
    tensors' ``feats`` and ``coords``, in key order): equal digests = bit-identical latents."""
    import torch
    digest = hashlib.sha256()
    latents = getattr(pipeline, "last_latents", None) or {}
    for key in sorted(latents):
        value = latents[key]
        parts = [value] if isinstance(value, torch.Tensor) else [value.feats, value.coords]
        for part in parts:
            digest.update(key.encode())
            digest.update(part.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest() if latents else None


def _touch_all(module) -> list[float]:
    """Read every weight of ``module`` once (the page-in of a mapped file)."""
    return [float(t.float().sum()) for t in module.state_dict().values()]


def load_breakdown(weights: dict, name: str = "tex_slat_flow_model_1024") -> dict:
    """Where one model's load time goes, cold, as the port's ``from_pretrained`` does it, and
    as a meta-device build with ``assign=True`` would do it (SPEC §2.1 "loading without a second
    copy"). Runs in the calling process; the file is evicted from the page cache first.

    Returns bytes and seconds: ``{"model", "bytes", "port": {"build", "read", "copy",
    "total"}, "meta_assign": {"build", "read", "assign", "touch", "total"}, "eviction":
    {...}}``. ``read`` is ``safetensors.torch.load_file``, which only maps the file; the disk
    read happens in ``copy`` (port) or ``touch`` (first pass over the weights) (each
    read is cold: the file is evicted again before it). The first meta-device build in a
    process pays a one-time setup of several seconds, so a warm-up build precedes the timed one.
    """
    import time

    # the stand-in's own package: the port folder is on sys.path once its weights module is
    # loaded (bench.pixal3d.sizes does), as for the real port
    import pixal3d.models as models
    import torch
    from safetensors.torch import load_file

    from . import disk

    ckpt = Path(weights["model_dir"]) / "ckpts" / name
    config = json.loads(ckpt.with_suffix(".json").read_text())
    path = ckpt.with_suffix(".safetensors")
    cls = getattr(models, config["name"])

    def timed(fn):
        t0 = time.perf_counter()
        value = fn()
        return value, time.perf_counter() - t0

    with torch.random.fork_rng(devices=[]):
        eviction = disk.evict([path])
        model, build = timed(lambda: cls(**config["args"]))
        state, read = timed(lambda: load_file(str(path)))
        _, copy = timed(partial(model.load_state_dict, state))
        nbytes = sum(t.numel() * t.element_size() for t in state.values())
        del model, state
        disk.evict([path])
        with torch.device("meta"):
            cls(**config["args"])  # warm-up: torch's first meta build pays a one-time setup
            meta, mbuild = timed(lambda: cls(**config["args"]))
        state, mread = timed(lambda: load_file(str(path)))
        _, assign = timed(partial(meta.load_state_dict, state, assign=True))
        # load_file maps the file (safetensors >= 0.4 on the CPU): nothing is read until the
        # weights are touched, so the page-in is timed too (one pass over every tensor).
        _, touch = timed(partial(_touch_all, meta))
        del meta, state
    return {"model": name, "bytes": nbytes,
            "port": {"build": build, "read": read, "copy": copy, "total": build + read + copy},
            "meta_assign": {"build": mbuild, "read": mread, "assign": assign, "touch": touch,
                            "total": mbuild + mread + assign + touch},
            "eviction": eviction.as_dict()}
