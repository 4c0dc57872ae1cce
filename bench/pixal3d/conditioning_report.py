"""The conditioning-memory bench's results as ``conditioning_memory.json`` and a Markdown table
(``conditioning_memory.md``) beside it."""
from __future__ import annotations

import json
from pathlib import Path

GIB = 2 ** 30
TARGET_GIB = 3.0  # texture conditioning, lean path, over its inputs (aim: 1 GiB)
#: texture conditioning at 1024² where the sampled pass declines (NAF's whole output in bands)
BANDED_TARGET_GIB = 5.0
#: the port's texture pass at 1024² at its peak, from its tensors (NAF's phase: its attention's
#: temporaries and map with the low-resolution projection; stageload.pixal3d.lean.checks)
PORT_PEAK_GIB = 20.8


def _row(case: dict) -> str:
    return (f"| {case['pass']} | {case['size']}x{case['size']} | {case['path']} | "
            f"{case['voxels']:,} | {case['over_inputs_bytes'] / GIB:.2f} | "
            f"{case['peak_bytes'] / GIB:.2f} | {case['seconds']:.1f} |")


def markdown(report: dict) -> str:
    """The report as Markdown: cases, agreement, the port's 1024x1024 figure from its tensors,
    and the target's verdict for the lean texture pass at 1024x1024."""
    lines = ["# Conditioning working memory (shape and texture passes)", "",
             f"Command: `{report['command']}`. Peak from outside each child (VmHWM); over "
             "inputs = peak - the child's footprint just before the pass (peak reset there).",
             "", "| pass | NAF output | path | voxels | peak over inputs (GiB) | peak (GiB) "
             "| seconds |", "|---|---|---|---|---|---|---|"]
    lines += [_row(c) for c in report["cases"]]
    lines += ["", "Agreement (max |lean - port| / max |port| over the `[N, 2048]` features):", ""]
    lines += [f"- {a['pass']} at {a['size']}x{a['size']}, {a.get('path', 'lean')}: "
              f"{a['max_rel_diff']:.2e}" for a in report["agreement"]] or ["- none run both ways"]
    port = report["port_1024_from_tensors"]
    lines += ["", f"Port's texture pass at 1024x1024, {port['label']}: NAF attention "
              f"{port['attention_bytes'] / GIB:.1f} GiB of tensors, projection over the whole "
              f"grid {port['projection_bytes'] / GIB:.1f} GiB (while the 4 GiB map is held)."]
    lean = next((c for c in report["cases"] if (c["pass"], c["size"], c["path"])
                 == ("tex_1024", 1024, "lean")), None)
    if lean is not None:
        got = lean["over_inputs_bytes"] / GIB
        lines += ["", f"Target: texture conditioning, lean, 1024x1024: {got:.2f} GiB over its "
                  f"inputs ({'met' if got <= TARGET_GIB else 'NOT met'}: <= {TARGET_GIB} GiB)."]
    banded = next((c for c in report["cases"] if (c["pass"], c["size"], c["path"])
                   == ("tex_1024", 1024, "banded")), None)
    if banded is not None:
        got = banded["over_inputs_bytes"] / GIB
        lines += ["", f"Target: texture conditioning at 1024x1024 where the sampled pass "
                  f"declines (NAF's whole output in bands): {got:.2f} GiB over its inputs "
                  f"({'met' if got <= BANDED_TARGET_GIB else 'NOT met'}: <= "
                  f"{BANDED_TARGET_GIB} GiB), against about {PORT_PEAK_GIB} GiB for the port's "
                  f"path at its peak (from its tensors): {got / PORT_PEAK_GIB:.2f} of it."]
    return "\n".join(lines) + "\n"


def write_report(report: dict, out_dir: Path) -> None:
    """Write ``conditioning_memory.json`` and ``.md`` into ``out_dir`` (created)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "conditioning_memory.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / "conditioning_memory.md").write_text(markdown(report))
