"""The one-time meta-device runtime cost (``direct.prepare_meta_runtime``): the first weight
initialiser run on a ``meta`` tensor imports ``torch._dynamo`` (hundreds of modules, tens of
MB). Without preparation the first direct load pays it; after ``prepare_meta_runtime`` — which
the staged adapter calls in ``setup`` — the first load imports nothing new and is much faster.
Each case runs in a fresh interpreter (the import happens once per process)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

_PROBE = textwrap.dedent("""
    import json, sys, time
    standin, path, mode = sys.argv[1:4]
    import torch
    from stageload.pixal3d.port.open import open_port
    from stageload.pixal3d.build.direct import load_port_model, prepare_meta_runtime
    port = open_port(standin)
    note = None
    if mode == "prepared":
        note = prepare_meta_runtime()
    elif mode == "adapter":
        from stageload.pixal3d import Pixal3DRun, RunOptions
        note = Pixal3DRun(standin, RunOptions(load="staged"), device="cpu").runtime_note
    dynamo_before = "torch._dynamo" in sys.modules
    n0, t0 = len(sys.modules), time.perf_counter()
    model, load_note = load_port_model(port.models, path, "cpu", lambda: 1 / 0)
    seconds = time.perf_counter() - t0
    imported = len(sys.modules) - n0
    again = prepare_meta_runtime()
    print(json.dumps({"mode": mode, "dynamo_before": dynamo_before, "first_load_seconds": seconds,
                      "first_load_imported": imported, "method": load_note.method,
                      "note": None if note is None else vars(note),
                      "again_modules": again.modules}))
""")


def _probe(standin_dir, path, mode):
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(standin_dir), path, mode],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def probes(standin_dir, standin_weights):
    path = f"{standin_weights.model_path}/ckpts/sparse_structure_flow_model"
    out = {mode: _probe(standin_dir, path, mode) for mode in ("cold", "prepared", "adapter")}
    print(json.dumps(out, indent=1))
    return out


def test_without_preparation_the_first_direct_load_imports_torch_dynamo(probes):
    cold = probes["cold"]
    assert cold["method"] == "meta_assign"
    assert not cold["dynamo_before"]  # opening the port does not import it
    assert cold["first_load_imported"] > 100, cold  # the one-time import, inside the load
    assert cold["again_modules"] == 0  # nothing left to pay afterwards


def test_prepare_meta_runtime_pays_it_up_front(probes):
    prepared = probes["prepared"]
    note = prepared["note"]
    assert prepared["dynamo_before"]
    assert note["modules"] > 100 and note["seconds"] > 0, note
    if sys.platform.startswith("linux"):
        assert note["rss_bytes"] > 20 * 10 ** 6, note  # tens of MB of interpreter state
    # what the load still imports is the model's own package, loaded with its class (the
    # DiT's attention and transformer modules: 14 in the stand-in); the runtime is hundreds
    assert prepared["first_load_imported"] < 30, prepared
    assert prepared["again_modules"] == 0  # idempotent
    # The load no longer carries the import (measured: ~1.5-2.5 s of it on a 2-CPU machine).
    assert prepared["first_load_seconds"] < probes["cold"]["first_load_seconds"] / 2, probes


def test_the_staged_adapter_prepares_in_setup(probes):
    adapter = probes["adapter"]
    assert adapter["note"] is not None and adapter["note"]["modules"] > 100, adapter
    assert adapter["dynamo_before"] and adapter["first_load_imported"] < 30, adapter
