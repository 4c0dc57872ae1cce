"""The package's public API, its events helpers, and that ``import stageload`` stays light."""
from __future__ import annotations

import subprocess
import sys

import pytest

from stageload.events import fan_out, make_event


def test_public_api_names():
    import stageload.releasing  # noqa: F401  importing the submodules must not hide the functions
    import stageload.sharing  # noqa: F401
    from stageload import ReleasedModuleError, StagedModels, on_call, release, share  # noqa: F401
    assert callable(stageload.release) and stageload.release.__name__ == "release"
    assert callable(stageload.share) and stageload.share.__name__ == "share"
    assert type(stageload) is type(sys), "the package is a plain module (no class swap)"
    for name in stageload.__all__:
        assert getattr(stageload, name) is not None
    with pytest.raises(AttributeError):
        _ = stageload.nothing_here


def test_import_stageload_does_not_import_torch(tmp_path):
    code = ("import sys, stageload, stageload.events, stageload.errors; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_make_event_and_fan_out():
    event = make_event("release", model="m", stage="s", bytes=4, seconds=0.5, extra=1)
    assert event["event"] == "release" and isinstance(event["t"], float) and event["extra"] == 1
    with pytest.raises(ValueError, match="bytes, seconds"):
        make_event("release", model="m", stage="s")
    a, b = [], []
    fan_out(a.append, None, b.append)(event)
    assert a == [event] and b == [event]


def test_lazy_exports_refuses_a_name_under_two_submodules():
    from stageload._lazy import lazy_exports

    with pytest.raises(ValueError, match="'x' is listed under 'a.one' and 'a.two'"):
        lazy_exports("a", {"a.one": ("x",), "a.two": ("y", "x")}, {})
    getattr_, dir_ = lazy_exports("stageload", {"stageload.events": ("make_event",)}, {})
    assert getattr_("make_event") is make_event and dir_() == ["make_event"]
    with pytest.raises(AttributeError, match="has no attribute 'fan_out'"):
        getattr_("fan_out")
