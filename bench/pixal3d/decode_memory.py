"""The decode stage's working memory on the real decoder layout: the port's path against the
lean one (``python -m bench.pixal3d.decode_memory``; run it under ``flock /tmp/bigmem.lock``).

What runs: the last two levels of the released sparse U-Net decoders (TRELLIS.2
``{shape,tex}_vae_next_dc_f16c32_fp16_ft_512.json``: 128 channels with a ConvNeXt block, the
``SparseResBlockC2S3d`` to 64 channels, no block at the finest level, then fp32
``F.layer_norm`` and the output layer; fp16 torso, checkpointing as released) built by the
stand-in port's real classes (``FlexiDualGridVaeDecoder`` with the mesh extraction,
``SparseUnetVaeDecoder`` guided by a subdivision) with seeded random weights, conv back end
``none``. That tail is where the decoders' peak is (docs/pixal3d.md, "The decode stage"): at a
character at 1024 it takes ~1.4 M voxels × 128 channels to ~5.5 M × 64; the coarser levels
carry ¼, 1/16, … of its voxels at 2, 4, … × its width. Input: a one-voxel spherical shell of
``--coarse`` voxels on the 512 grid (sorted coordinates, as the port's are); the random
``to_subdiv`` (or guide) keeps about half of the children, ~4 per voxel, as a surface does.

Each case runs in its own process (``bench.own_peak``: the kernel's ``VmHWM`` at exit, from
outside the measured code); inside it, after the model and the input exist, the high-water mark
is reset (after one small warm-up decode) and the decode runs; glibc is told to give freed
blocks back (``MALLOC``) so the resident size follows what is alive; with ``port``, forward
hooks on the up block's parts, the neighbour-map builder and the mesh extraction read and reset
the high-water mark at each boundary, so each segment's peak (over the footprint before the
decode) says where the peak is. ``working_bytes``: the largest segment, i.e. the decode's peak
over its inputs and weights. The lean case runs
``stageload.pixal3d.lean.decoders.chunk_decoder`` and the mesh extraction by voxel ranges
(``stageload.pixal3d.lean.extraction``) with the product's default budget scaled by
``coarse / REAL_COARSE`` (so a level has as many ranges as at a character's counts with the
default 64 MiB, and lean's figure scales to them) and records the output's SHA-256, which must
equal the port's. (Results before the extraction was lean, e.g. ``2026-12-06/decode_memory``,
ran the port's extraction in the lean case too.)

``--extraction FINE...`` measures the mesh extraction alone, port and lean, at fine voxel
counts a decode here cannot reach (``bench.pixal3d.extraction_memory``; ``decode_extraction``
files unless ``--name``).

One thread (``torch.set_num_threads(1)``): this 2-core machine is shared, and fp16 matrix
products on its CPU run ~1 GFLOP/s at best, so the real voxel counts (hours) are out of reach:
the sizes measured are the largest that ran in minutes, and the bytes per fine voxel measured at
two sizes carry the figures to a character's counts (said so in the table). Results:
``bench/results/<date>/decode_memory.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.pixal3d import extraction_memory

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30
#: A character at 1024 (the port's example, SPEC §1): ~21,500 latent voxels at 64³, about ×4 a
#: level (a surface), so 1.38 M at 512³ (the last up block's input) and 5.5 M fine voxels
#: (SPEC §2.7b: ~6.3 M; the real decoded mesh's 3.9 M vertices are one per kept voxel).
REAL_COARSE, REAL_FINE = 21_500 * 4 ** 3, 21_500 * 4 ** 4
#: glibc returns freed blocks over 128 KiB to the system at once, so the resident size follows
#: what is alive (else a freed tensor's pages could stay resident and count in a later segment).
MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def _decoder(kind: str):
    import pixal3d.models as models
    args = dict(model_channels=[128, 64], latent_channels=32, num_blocks=[1, 0],
                block_type=["SparseConvNeXtBlock3d"] * 2,
                up_block_type=["SparseResBlockC2S3d"],
                block_args=[{"use_checkpoint": True}] * 2, use_fp16=True)
    if kind == "shape":
        return models.FlexiDualGridVaeDecoder(resolution=1024, **args).eval()
    return models.SparseUnetVaeDecoder(out_channels=6, pred_subdiv=False, **args).eval()


def shell(count: int):
    """int32 [≈count, 4] coords (batch 0): a one-voxel spherical shell on the 512 grid, sorted."""
    import torch
    radius = math.sqrt(count / (4 * math.pi))
    side = int(2 * radius + 4)
    r = torch.arange(side, dtype=torch.float32) - side / 2 + 0.5
    pts = []
    for x in range(side):
        d = torch.sqrt(r[x] ** 2 + r[:, None] ** 2 + r[None, :] ** 2)
        yz = ((d - radius).abs() < 0.5).nonzero()
        pts.append(torch.cat([torch.full((len(yz), 1), x), yz], 1))
    xyz = torch.cat(pts).int() + (256 - side // 2)
    return torch.cat([torch.zeros(len(xyz), 1, dtype=torch.int32), xyz], 1)


class Segments:
    """Peak of each stretch between marks: ``VmHWM`` over ``base``, then reset."""

    def __init__(self, base: int):
        self.base, self.last, self.rows = base, "start", []

    def mark(self, label: str) -> None:
        from stageload.meter import high_water_mark, reset_high_water_mark
        peak = high_water_mark(os.getpid()) - self.base
        self.rows.append({"from": self.last, "to": label, "peak_bytes": peak})
        self.last = label
        reset_high_water_mark(os.getpid())


def _watch(decoder, seg: Segments) -> list:
    """Marks around the port's parts (forward hooks; the conv_none neighbour map builder)."""
    import pixal3d.modules.sparse.conv.conv_none as conv_none
    up = decoder.blocks[0][-1]
    parts = {"convnext": decoder.blocks[0][0], "norm1": up.norm1, "conv1": up.conv1,
             "updown": up.updown, "norm2": up.norm2, "conv2": up.conv2,
             "output_layer": decoder.output_layer}
    handles = []
    for name, module in parts.items():
        handles.append(module.register_forward_pre_hook(
            lambda m, a, n=name: seg.mark(f"{n} begins")))
        handles.append(module.register_forward_hook(
            lambda m, a, o, n=name: seg.mark(f"{n} ends")))
    build = conv_none.submanifold_neighbours

    def neighbours(*args, **kwargs):
        seg.mark("neighbour map begins")
        out = build(*args, **kwargs)
        seg.mark("neighbour map ends")
        return out
    conv_none.submanifold_neighbours = neighbours
    return handles


def _warm_up(decoder, kind: str) -> None:
    """One small decode first (the port's path), so the libraries it loads on first use
    (``torch.utils.checkpoint`` imports ``torch._dynamo``) are not counted as the decode's."""
    import pixal3d.modules.sparse as sp
    import torch
    coords = shell(60)
    latent = sp.SparseTensor(feats=torch.zeros(len(coords), 32), coords=coords)
    with torch.no_grad():
        if kind == "shape":
            decoder(latent, return_subs=True)
        else:
            decoder(latent, guide_subs=[latent.replace(torch.ones(len(coords), 8).half())])


def run_case(kind: str, path: str, coarse: int, result: Path) -> None:
    import torch
    torch.set_num_threads(1)
    from standin import PORT_DIR
    sys.path.insert(0, str(PORT_DIR))
    import pixal3d.models.sc_vaes.fdg_vae as fdg
    import pixal3d.modules.sparse as sp

    from stageload.meter import footprint, reset_high_water_mark
    torch.manual_seed(0)
    decoder = _decoder(kind)
    coords = shell(coarse)
    gen = torch.Generator().manual_seed(1)
    latent = sp.SparseTensor(feats=torch.randn(len(coords), 32, generator=gen), coords=coords)
    guide = None if kind == "shape" else [sp.SparseTensor(
        feats=torch.randn(len(coords), 8, generator=gen).half(), coords=coords)]
    _warm_up(decoder, kind)
    events: list = []
    handles = []
    if path == "lean":
        from stageload.pixal3d.lean.decoders import DECODER_BUDGET, chunk_decoder
        budget = max(1, DECODER_BUDGET * len(coords) // REAL_COARSE)
        handles = chunk_decoder(decoder, f"{kind}_decoder", budget, sink=events.append)
        from stageload.pixal3d.lean import extraction
        handles += extraction.install(fdg, "flexible_dual_grid_to_mesh", budget,
                                      sink=events.append)
    gc.collect()
    reset_high_water_mark(os.getpid())
    seg = Segments(footprint(os.getpid(), tree=False))
    hooks = _watch(decoder, seg) if path == "port" else []
    mesh_fn = fdg.flexible_dual_grid_to_mesh

    def mesh(*args, **kwargs):
        seg.mark("mesh extraction begins")
        out = mesh_fn(*args, **kwargs)
        seg.mark("mesh extraction ends")
        return out
    fdg.flexible_dual_grid_to_mesh = mesh
    start, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        out = decoder(latent, return_subs=True) if kind == "shape" else \
            decoder(latent, guide_subs=guide)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    seg.mark("end")
    for h in hooks + handles:
        h.remove()
    if kind == "shape":
        m = out[0][0]
        digest_of = [m.vertices, m.faces, m.fdg_dual_vertices]
        fine = len(m.fdg_coords)
    else:
        digest_of, fine = [out.feats, out.coords], len(out.coords)
    digest = hashlib.sha256(b"".join(t.contiguous().numpy().tobytes() for t in digest_of))
    result.write_text(json.dumps({
        "segments": seg.rows, "working_bytes": max(r["peak_bytes"] for r in seg.rows),
        "coarse": len(coords), "fine": fine, "seconds": seconds, "cpu_seconds": cpu,
        "sha256": digest.hexdigest(), "events": events}))


def _measure(kind: str, path: str, coarse: int, scratch: Path) -> dict:
    peak, res = scratch / f"{kind}-{path}-{coarse}.peak", scratch / f"{kind}-{path}-{coarse}.json"
    cmd = [sys.executable, "-m", "bench.own_peak", str(peak), "-m", "bench.pixal3d.decode_memory",
           "--case", f"{kind}:{path}", "--coarse", str(coarse), "--result", str(res)]
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, **MALLOC})
    out = json.loads(res.read_text())
    out.update(kind=kind, path=path, peak_at_exit_bytes=json.loads(peak.read_text())["peak_bytes"])
    print(f"{kind} {path} coarse={out['coarse']} fine={out['fine']}: "
          f"{out['working_bytes'] / GIB:.3f} GiB, {out['seconds']:.0f} s", flush=True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case")
    parser.add_argument("--coarse", type=int, nargs="+", default=[6_000, 18_000])
    parser.add_argument("--result", type=Path)
    parser.add_argument("--kinds", nargs="+", default=["shape", "texture"])
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results" /
                        datetime.date.today().isoformat())
    parser.add_argument("--extraction", type=int, nargs="+", metavar="FINE",
                        help="measure the mesh extraction alone at these fine voxel counts")
    parser.add_argument("--flags", nargs="+", default=["surface", "random"])
    parser.add_argument("--name", help="file stem of the results (default decode_memory, or "
                                        "decode_extraction with --extraction)")
    ns = parser.parse_args(argv)
    if ns.case:
        kind, path = ns.case.split(":")
        if kind.startswith("extraction-"):
            extraction_memory.run_case(kind.split("-", 1)[1], path, ns.coarse[0], ns.result)
        else:
            run_case(kind, path, ns.coarse[0], ns.result)
        return 0
    if ns.extraction:
        return _extraction(ns)
    with tempfile.TemporaryDirectory() as tmp:
        cases = [_measure(kind, path, coarse, Path(tmp)) for coarse in ns.coarse
                 for kind in ns.kinds for path in ("port", "lean")]
    from bench.pixal3d.decode_report import markdown, report
    summary = report(cases)
    ns.out_dir.mkdir(parents=True, exist_ok=True)
    stem = ns.out_dir / (ns.name or "decode_memory")
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(summary))
    print(markdown(summary))
    return 0


def _extraction(ns) -> int:
    """The mesh extraction's cases (``bench.pixal3d.extraction_memory``), port and lean, each
    in its own process; writes ``<name>.json`` and ``.md`` (refusing to overwrite)."""
    out = ns.out_dir / f"{ns.name or 'decode_extraction'}.json"
    if out.exists():
        raise SystemExit(f"{out} exists: pass another --name")
    with tempfile.TemporaryDirectory() as tmp:
        cases = [extraction_memory.measure(flags, path, fine, Path(tmp), ROOT, MALLOC)
                 for fine in ns.extraction for flags in ns.flags for path in ("port", "lean")]
    summary = extraction_memory.report(cases, REAL_FINE)
    ns.out_dir.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1) + "\n")
    out.with_suffix(".md").write_text(extraction_memory.markdown(summary))
    print(extraction_memory.markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
