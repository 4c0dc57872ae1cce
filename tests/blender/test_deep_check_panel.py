"""The preferences' Check with "Deep" on, in the real ``bpy`` with the built extension: the
add-on runs the real runner's deep self-check on the stand-in port with the interpreter set in
its preferences, shows one line per lean part and where the report went, and the report is a
new file in the output folder."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.blender.test_addon import built_zip, scenario  # noqa: F401  (fixture)
from tests.pixal3d.conftest import standin_dir, standin_weights  # noqa: F401

pytestmark = [pytest.mark.blender, pytest.mark.slow]


def test_the_deep_check_from_the_preferences(built_zip, standin_dir, standin_weights,  # noqa: F811
                                             tmp_path):
    env = {k: v for k, v in standin_weights.env.items() if os.environ.get(k) != v}
    facts = scenario("deep_check", built_zip, tmp_path, str(standin_dir), sys.executable,
                     timeout=1200, env={**env, "PIXAL3D_DEVICE": "cpu"})
    assert facts["result"] == ["FINISHED"]
    assert "with the deep check" in facts["while_running"], facts["while_running"]
    lines = [line.strip() for line in facts["check_report"].splitlines()]  # indented
    assert "Deep check: every lean part agrees with the port" in lines, lines
    parts = [line.split(":")[0] for line in lines
             if line.startswith(("conditioning:", "attention:", "decoder:"))]
    assert parts == ["conditioning", "attention", "decoder"], lines
    (report,) = facts["reports"]
    assert f"report: {report}" in lines, lines
    deep = json.loads(Path(report).read_text(encoding="utf-8"))["deep"]
    assert deep["ok"] is True and [p["part"] for p in deep["parts"]] == parts
