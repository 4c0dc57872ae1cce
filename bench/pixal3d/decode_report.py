"""The summary and table of ``bench.pixal3d.decode_memory``: per decoder and size the port's
and lean's working memory, their ratio, whether the outputs are the same bytes, where the port's
peak is (its largest segments), and both carried to a character's counts by the bytes per fine
voxel of the largest size (labelled: scaled, not measured)."""
from __future__ import annotations

GIB = 1 << 30
REAL_FINE = 21_500 * 4 ** 4


def split(segments: list[dict]) -> tuple[int, int]:
    """(the decoder pass's peak, the mesh extraction's peak; 0 without one), bytes over the
    footprint before the decode: the segments before the extraction begins, and its own."""
    decoder, mesh, inside = 0, 0, False
    for row in segments:
        if row["from"] == "mesh extraction begins":
            mesh, inside = row["peak_bytes"], True
        elif not inside:
            decoder = max(decoder, row["peak_bytes"])
    return decoder, mesh


def report(cases: list[dict]) -> dict:
    """Pairs ``port``/``lean`` cases by (kind, coarse) into rows; see the module docstring."""
    by = {(c["kind"], c["coarse"], c["path"]): c for c in cases}
    rows = []
    for (kind, coarse, path), port in sorted(by.items()):
        if path != "port" or (kind, coarse, "lean") not in by:
            continue
        lean = by[(kind, coarse, "lean")]
        top = sorted(port["segments"], key=lambda r: -r["peak_bytes"])[:4]
        (port_dec, port_mesh), (lean_dec, lean_mesh) = split(port["segments"]), \
            split(lean["segments"])
        rows.append({
            "port_decoder_bytes": port_dec, "lean_decoder_bytes": lean_dec,
            "decoder_ratio": lean_dec / port_dec, "port_mesh_bytes": port_mesh,
            "lean_mesh_bytes": lean_mesh,
            "decoder": kind, "coarse_voxels": coarse, "fine_voxels": port["fine"],
            "port_bytes": port["working_bytes"], "lean_bytes": lean["working_bytes"],
            "ratio": lean["working_bytes"] / port["working_bytes"],
            "same_output": port["sha256"] == lean["sha256"],
            "port_seconds": round(port["seconds"], 1), "lean_seconds": round(lean["seconds"], 1),
            "port_peak_segments": [f"{r['from']} → {r['to']}: {r['peak_bytes'] / GIB:.3f} GiB"
                                   for r in top],
            "port_segments": port["segments"], "lean_events": lean["events"],
            "port_process_peak_bytes": port["peak_at_exit_bytes"],
            "lean_process_peak_bytes": lean["peak_at_exit_bytes"]})
    fields = {name: name for name in ("port_bytes", "lean_bytes", "port_decoder_bytes",
                                      "lean_decoder_bytes")}
    scaled = scale_largest(rows, "decoder", REAL_FINE, dict(fields, mesh_bytes="port_mesh_bytes"))
    return {"rows": rows, "scaled_to_a_character": scaled}


def scale_largest(rows: list[dict], group: str, real_fine: int, fields: dict) -> dict:
    """For each value of ``row[group]``, the row with the most ``fine_voxels`` scaled per voxel
    to ``real_fine`` voxels: ``{value: {"fine_voxels": real_fine, "from_fine_voxels": n,
    name: int(row[field] × real_fine / n) for name, field in fields}}`` (bytes; a projection
    from the largest measured size, not a measurement)."""
    scaled = {}
    for value in sorted({r[group] for r in rows}):
        big = max((r for r in rows if r[group] == value), key=lambda r: r["fine_voxels"])
        factor = real_fine / big["fine_voxels"]
        scaled[value] = {"fine_voxels": real_fine, "from_fine_voxels": big["fine_voxels"],
                         **{name: int(big[field] * factor) for name, field in fields.items()}}
    return scaled


def markdown(summary: dict) -> str:
    out = ["| decoder | coarse → fine voxels | decoder pass: port | lean | lean ÷ port | "
           "mesh extraction (both) | whole: port | lean | lean ÷ port | same bytes | port s | "
           "lean s | the port's largest segments |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary["rows"]:
        out.append(f"| {r['decoder']} | {r['coarse_voxels']:,} → {r['fine_voxels']:,} | "
                   f"{r['port_decoder_bytes'] / GIB:.3f} GiB | "
                   f"{r['lean_decoder_bytes'] / GIB:.3f} GiB | {r['decoder_ratio']:.2f} | "
                   f"{r['port_mesh_bytes'] / GIB:.3f} / {r['lean_mesh_bytes'] / GIB:.3f} GiB | "
                   f"{r['port_bytes'] / GIB:.3f} GiB | {r['lean_bytes'] / GIB:.3f} GiB | "
                   f"{r['ratio']:.2f} | {'yes' if r['same_output'] else 'NO'} | "
                   f"{r['port_seconds']} | {r['lean_seconds']} | "
                   f"{'; '.join(r['port_peak_segments'][:3])} |")
    for kind, s in summary["scaled_to_a_character"].items():
        out.append(f"| {kind}, scaled (not measured) | {s['fine_voxels']:,} fine (from "
                   f"{s['from_fine_voxels']:,}) | {s['port_decoder_bytes'] / GIB:.2f} GiB | "
                   f"{s['lean_decoder_bytes'] / GIB:.2f} GiB | "
                   f"{s['lean_decoder_bytes'] / s['port_decoder_bytes']:.2f} | "
                   f"{s['mesh_bytes'] / GIB:.2f} GiB | {s['port_bytes'] / GIB:.2f} GiB | "
                   f"{s['lean_bytes'] / GIB:.2f} GiB | {s['lean_bytes'] / s['port_bytes']:.2f} | "
                   f"– | – | – | bytes per fine voxel × {s['fine_voxels']:,} |")
    return "\n".join(out) + "\n"
