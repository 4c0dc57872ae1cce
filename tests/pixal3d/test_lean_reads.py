"""Every attribute the lean conditioning reads on the port's objects is checked before use: one
that this port lacks (a later port may rename it) makes the pass fall back to a path of the
port's, with a ``warning`` naming it — never an ``AttributeError`` (stand-in port, CPU, tiny
sizes).

The attribute is hidden from lean only: the port's own code still finds it (the stand-in's
code reads it, as a port that knows it by another name would), so the fallback's result can be
compared with the port's own."""
from __future__ import annotations

import contextlib

import pytest
import torch

from stageload.hooks import around_call
from stageload.pixal3d.lean import conditioning as lean
from stageload.pixal3d.port.open import open_port

REL = 1e-5


@pytest.fixture(scope="module")
def pipeline(standin_dir, standin_weights):
    port = open_port(standin_dir)
    return port.gm.init_pipeline(port.gm.MODEL_PATH, torch.device("cpu"))


@contextlib.contextmanager
def hidden(obj, name: str):
    """``obj.name`` raises ``AttributeError`` (as on a port without it) except inside the
    port's own ``get_proj_cond_shape``; yields the switch ``seen`` (a one-item list)."""
    seen = [False]
    base = type(obj)

    def __getattribute__(self, attr):
        if attr == name and not seen[0]:
            raise AttributeError(f"{base.__name__!r} object has no attribute {name!r}")
        return base.__getattribute__(self, attr)

    def __getattr__(self, attr):  # nn.Module's finds submodules and parameters here
        if attr == name and not seen[0]:
            raise AttributeError(f"{base.__name__!r} object has no attribute {name!r}")
        return base.__getattr__(self, attr)

    members = {"__getattribute__": __getattribute__, "__module__": base.__module__}
    if hasattr(base, "__getattr__"):
        members["__getattr__"] = __getattr__
    obj.__class__ = type(base.__name__, (base,), members)
    try:
        yield seen
    finally:
        obj.__class__ = base


def _coords(resolution=64, n=800, seed=3):
    g = torch.Generator().manual_seed(seed)
    xyz = torch.unique(torch.randint(0, resolution, (n, 3), generator=g), dim=0)
    return torch.cat([torch.zeros(len(xyz), 1, dtype=torch.long), xyz], dim=1).int()


def _image():
    from PIL import Image
    g = torch.Generator().manual_seed(7)
    return Image.fromarray((torch.rand(96, 96, 3, generator=g) * 255).byte().numpy())


def _pass(pipeline, extractor):
    return pipeline.get_proj_cond_shape(extractor, [_image()], _coords(), camera_angle_x=0.7,
                                        distance=2.1, mesh_scale=1.0,
                                        grid_resolution_override=64)


def _port_sees(pipeline, seen):
    """The port's own pass (under lean's hook) finds the hidden attribute."""
    def call(original, *args, **kwargs):
        seen[0] = True
        try:
            return original(*args, **kwargs)
        finally:
            seen[0] = False
    return around_call(pipeline, "get_proj_cond_shape", call)


#: (whose attribute, its name, the fallback lean takes, words of its cause)
READS = [
    ("extractor", "naf_target_size", "port_conditioning", "naf_target_size or patch_number"),
    ("extractor", "patch_number", "port_conditioning", "naf_target_size or patch_number"),
    ("extractor", "_load_naf", "port_conditioning", "no _load_naf"),
    ("extractor", "grid_resolution", "banded_upsampler", "grid_resolution"),
    ("extractor", "proj_grid", "banded_upsampler", "no proj_grid"),
    ("pipeline", "device", "banded_upsampler", "pipeline.device"),
    ("pipeline", "low_vram", "banded_upsampler", "no low_vram"),
]


@pytest.mark.parametrize("owner, name, kind, words", READS, ids=[r[1] for r in READS])
def test_an_attribute_lean_reads_is_checked_first(pipeline, owner, name, kind, words):
    extractor = pipeline.image_cond_model_tex_1024
    ported = _pass(pipeline, extractor)
    obj = extractor if owner == "extractor" else pipeline
    kept_naf = extractor.naf_model
    if name == "_load_naf":
        extractor.naf_model = None  # not loaded yet: lean would load it the port's way
    events: list[dict] = []
    try:
        with hidden(obj, name) as seen:
            inner = _port_sees(pipeline, seen)
            handle = lean.install(pipeline, events.append, stage=lambda: "texture")
            try:
                out = _pass(pipeline, extractor)
            finally:
                handle.remove()
                inner.remove()
    finally:
        extractor.naf_model = extractor.naf_model or kept_naf
    warnings = [e for e in events if e["event"] == "warning"]
    assert warnings and {e["fallback"] for e in warnings} == {kind}, warnings
    assert all(words in e["cause"] for e in warnings), warnings
    feats, want = out["cond"]["proj"].feats, ported["cond"]["proj"].feats
    assert float((feats - want).abs().max() / want.abs().max()) <= REL
    assert not [e for e in events if e["event"] == "working_memory"
                and e["tool"] == "sampled_projection"]


def test_a_decoder_lean_cannot_find_runs_whole_and_says_so(pipeline):
    """The decoders are read through ``pipeline.models`` inside ``decode_shape_slat``: a
    pipeline without it (hidden from lean, the port's own decode still finds it) decodes as the
    port does, with a ``port_decoder`` warning naming the decoder."""
    from stageload.pixal3d.lean import models as lean_models
    from stageload.pixal3d.selfcheck import inputs

    module = __import__(type(pipeline).__module__, fromlist=["SparseTensor"])
    coords = inputs.block(4, 64)
    slat = module.SparseTensor(feats=inputs.normal(len(coords), 8), coords=coords)
    with torch.no_grad():
        want = pipeline.decode_shape_slat(slat, 1024)
    events: list[dict] = []
    with hidden(pipeline, "models") as seen:
        def port(original, *args, **kwargs):
            seen[0] = True
            try:
                return original(*args, **kwargs)
            finally:
                seen[0] = False
        inner = around_call(pipeline, "decode_shape_slat", port)
        lean = lean_models.install(pipeline, events.append)
        try:
            with torch.no_grad():
                got = pipeline.decode_shape_slat(slat, 1024)
        finally:
            lean.remove()
            inner.remove()
    (warning,) = [e for e in events if e["event"] == "warning"]
    assert warning["fallback"] == "port_decoder"
    assert warning["cause"] == "pipeline.models has no shape_slat_decoder"
    got, want = (got[0], want[0]) if isinstance(want, tuple) else (got, want)  # (meshes, subs)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a.vertices, b.vertices) and torch.equal(a.faces, b.faces)
