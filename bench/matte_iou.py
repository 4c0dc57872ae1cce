"""``python -m bench.matte_iou``: the keyed matte's IoU with the alpha, before and after a change.

Usage (from the repository root)::

    .venv/bin/python -m bench.matte_iou                  # before = merge-base with main
    .venv/bin/python -m bench.matte_iou --before 9dee749 --out /tmp/m.json

Every PNG with alpha in ``tests/data/images`` is flattened (alpha 255 everywhere) into pictures
whose true silhouette is known — its own alpha ≥ 128, the line the alpha matte uses:

- ``plain_<colour>``: composited onto white, light blue, mid grey, black and green, saved as
  JPEG q90 (``plain_white_png``: onto white, kept lossless);
- ``belly_rim<N>``: a white belly with no drawn line (:func:`shaded_white_belly`), its rim
  shaded ``N`` RGB units per channel off white, onto white as JPEG q90 — a tester's held-back
  picture, a white belly on a white background, modelled on the shared art.

Each picture is keyed by ``runner.backends.builtin.matte.compute_matte(..., had_alpha=False)``
from two trees: ``before`` (``git archive`` of ``--before``'s ``runner/`` and the ``stageload/``
it imports, into a temporary folder) and ``after`` (this checkout), each in its own child
process (``--child ROOT``) so the two ``runner`` packages never meet. The JSON written to
``--out`` (default ``bench/results/matte_iou.json``) holds, per case and picture, the IoU before
and after, and per case the minimum and mean of each. A picture the matte refuses counts as IoU 0.
Exit code 0 when both children ran.
"""
from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
IMAGES = REPO / "tests" / "data" / "images"
#: plain backgrounds, name → RGB 0..255.
BACKGROUNDS = {"white": (255, 255, 255), "light_blue": (200, 220, 255), "grey": (128, 128, 128),
               "black": (0, 0, 0), "green": (0, 177, 64)}
#: rim depths (RGB units per channel off white) of the shaded belly.
RIMS = (20, 30, 45, 60, 80, 100, 140)


def flatten(rgba: np.ndarray, background=(255, 255, 255), jpeg: bool = True) -> Image.Image:
    """``rgba`` (uint8 ``(H, W, 4)``) composited onto an opaque colour, optionally via JPEG q90."""
    flat = Image.new("RGBA", (rgba.shape[1], rgba.shape[0]), (*background, 255))
    flat.alpha_composite(Image.fromarray(rgba))
    if jpeg:
        buffer = io.BytesIO()
        flat.convert("RGB").save(buffer, "JPEG", quality=90)
        flat = Image.open(buffer).convert("RGBA")
    return flat


def shaded_white_belly(rgba: np.ndarray, rim: float, falloff_px: float = 4.0) -> np.ndarray:
    """The character with a white belly that meets its silhouette without a drawn line.

    The belly is a disc (radius 15 % of the silhouette's height) centred on the silhouette's left
    edge at 45 % of its height, clipped to the alpha; its colour is white shaded towards the
    silhouette as a rendered white body is (the surface turns away at the edge):
    ``255 − rim · exp(−(e − 1) / falloff_px)`` per channel, ``e`` the Euclidean distance (px) to
    the nearest fully transparent pixel. Alpha is unchanged, so the truth is the picture's own.

    Args:
        rgba: uint8 ``(H, W, 4)`` with a real alpha.
        rim: how far the outermost belly pixel is off white, RGB units per channel (0..255).
        falloff_px: the shading's 1/e width inward, px.

    Returns:
        A new uint8 ``(H, W, 4)`` array.
    """
    out = rgba.copy()
    truth = rgba[..., 3] >= 128
    rows = np.flatnonzero(truth.any(axis=1))
    height = rows[-1] - rows[0]
    cy = int(rows[0] + 0.45 * height)
    cx = np.flatnonzero(truth[cy])[0]
    yy, xx = np.indices(truth.shape)
    disc = ((yy - cy) ** 2 + (xx - cx) ** 2 <= (0.15 * height) ** 2) & (rgba[..., 3] > 0)
    inward = ndimage.distance_transform_edt(rgba[..., 3] > 0)
    shade = 255.0 - rim * np.exp(-(inward - 1.0) / falloff_px)
    out[disc, :3] = np.clip(shade[disc], 0, 255).astype(np.uint8)[:, None]
    return out


def pictures(rgba: np.ndarray) -> dict[str, Image.Image]:
    """Case name → flattened picture of one character (see the module docstring)."""
    out = {f"plain_{name}": flatten(rgba, colour) for name, colour in BACKGROUNDS.items()}
    out["plain_white_png"] = flatten(rgba, jpeg=False)
    for rim in RIMS:
        out[f"belly_rim{rim}"] = flatten(shaded_white_belly(rgba, rim))
    return out


def measure() -> dict[str, dict[str, float]]:
    """Case → picture name → IoU of the keyed matte with the alpha ≥ 128 silhouette."""
    from runner.backends.builtin.errors import BuiltinBackendError
    from runner.backends.builtin.matte import compute_matte

    scores: dict[str, dict[str, float]] = {}
    for path in sorted(IMAGES.glob("*.png")):
        with Image.open(path) as im:
            if "A" not in im.getbands():
                continue
            rgba = np.asarray(im.convert("RGBA"))
        truth = rgba[..., 3] >= 128
        for case, picture in pictures(rgba).items():
            try:
                mask = compute_matte(picture, had_alpha=False).mask
                score = float((mask & truth).sum() / (mask | truth).sum())
            except BuiltinBackendError:
                score = 0.0
            scores.setdefault(case, {})[path.name] = round(score, 4)
    return scores


def run_child(root: Path) -> dict[str, dict[str, float]]:
    """:func:`measure` in a child process whose ``runner`` package is ``root/runner``."""
    done = subprocess.run([sys.executable, "-m", "bench.matte_iou", "--child", str(root)],
                          cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def export_tree(revision: str, into: Path) -> None:
    """``runner/`` and ``stageload/`` (which it imports) as of git ``revision``, unpacked under
    ``into`` (``git archive``)."""
    data = subprocess.run(["git", "archive", revision, "runner", "stageload"], cwd=REPO,
                          capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(into, filter="data")


def summary(before: dict, after: dict) -> dict:
    """Per case: per picture ``{"before", "after"}`` and the min and mean of each."""
    out = {}
    for case in after:
        rows = {name: {"before": before.get(case, {}).get(name), "after": score}
                for name, score in after[case].items()}
        stats = {}
        for side, table in (("before", before.get(case, {})), ("after", after[case])):
            values = list(table.values())
            stats[side] = {"min": min(values), "mean": round(float(np.mean(values)), 4)}
        out[case] = {"pictures": rows, **stats}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="git revision for 'before' (default: merge-base main)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "matte_iou.json")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.path.insert(0, str(args.child))
        print(json.dumps(measure()))
        return 0
    before_rev = args.before or subprocess.run(
        ["git", "merge-base", "HEAD", "main"], cwd=REPO, capture_output=True, text=True,
        check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        export_tree(before_rev, Path(tmp))
        before = run_child(Path(tmp))
    after = run_child(REPO)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "runner"], cwd=REPO,
                                capture_output=True, text=True, check=True).stdout.strip())
    result = {"before": before_rev, "after": head + (" + uncommitted runner/" if dirty else ""),
              "images": str(IMAGES.relative_to(REPO)), "threshold_line": "alpha >= 128",
              "cases": summary(before, after)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for case, row in result["cases"].items():
        print(f"{case:18s} before min {row['before']['min']:.4f} mean {row['before']['mean']:.4f}"
              f"   after min {row['after']['min']:.4f} mean {row['after']['mean']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
