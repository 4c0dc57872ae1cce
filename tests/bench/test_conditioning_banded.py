"""The conditioning bench's ``banded`` case at a reduced size (``bench.pixal3d.
conditioning_case``, each path in its own process, peak from the child's ``VmHWM``): where the
sampled pass declines — the port's ``PIXAL3D_PROJ_GRID_DEVICE`` set, one of its preconditions
forced off while the banded one holds — lean computes NAF's whole output in bands, says so with
a ``banded_upsampler`` warning, gives the port's features, and holds NAF's map plus its bands
over its inputs: a fraction of the port's path on the same inputs. The full-size figure (1024²)
is the bench's (``python -m bench.pixal3d.conditioning_memory``, bench/results/)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
#: NAF output 256², NAF 64 wide, 256 DINOv3 channels, a 256-pixel image, 2,000 voxels on 64³
SMALL = ["--pass", "tex_1024", "--size", "256", "--voxels", "2000", "--naf-dim", "64",
         "--channels", "256", "--image-size", "256"]
BAND = 64 * 2 ** 20  # stageload.pixal3d.lean.attention.BAND_BYTES


@pytest.fixture(scope="module")
def standin_weights_folder(tmp_path_factory) -> Path:
    """Stand-in weights and the ``env.json`` the case reads them through."""
    from standin import make_weights
    folder = tmp_path_factory.mktemp("weights")
    info = make_weights(folder, scale=1e-4)
    (folder / "env.json").write_text(json.dumps(info.env))
    return folder


def _case(path: str, weights: Path, work: Path) -> tuple[dict, np.ndarray]:
    peak, info, feats = work / f"{path}.peak.json", work / f"{path}.info.json", work / f"{path}.f32"
    subprocess.run([sys.executable, "-m", "bench.own_peak", str(peak), "-m",
                    "bench.pixal3d.conditioning_case", *SMALL, "--path", path, "--weights",
                    str(weights), "--out", str(feats), "--info", str(info)],
                   check=True, cwd=REPO, timeout=600, capture_output=True)
    facts = json.loads(info.read_text())
    facts["over_inputs"] = json.loads(peak.read_text())["peak_bytes"] - facts["baseline_bytes"]
    return facts, np.fromfile(feats, dtype=np.float32).reshape(facts["features"])


@pytest.mark.slow
def test_where_the_sampled_pass_declines_naf_runs_in_bands_at_a_fraction_of_the_port(
        tmp_path, standin_weights_folder):
    port, port_feats = _case("port", standin_weights_folder, tmp_path)
    lean, _ = _case("lean", standin_weights_folder, tmp_path)
    banded, banded_feats = _case("banded", standin_weights_folder, tmp_path)
    assert banded["fallbacks"] == ["banded_upsampler"] and lean["fallbacks"] == []
    assert float(np.abs(banded_feats - port_feats).max() / np.abs(port_feats).max()) <= 1e-5
    # NAF's whole map and its bands over what the sampled pass holds — a band's pixels, their
    # copy into the map and one attention chunk, each at most BAND —; a fraction of the port's
    figures = {k: v["over_inputs"] / 2 ** 20 for k, v in
               (("port", port), ("lean", lean), ("banded", banded))}
    assert banded["over_inputs"] <= lean["over_inputs"] + banded["naf_map_bytes"] + 3 * BAND, \
        figures
    assert banded["over_inputs"] < 0.5 * port["over_inputs"], figures
