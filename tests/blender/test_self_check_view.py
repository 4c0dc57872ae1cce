"""The preferences' deep Check, without Blender (``runner_client.self_check``): the command line
it runs, a report file name that is always new, and a deep check that did not run said in
words."""
from __future__ import annotations

from blender_addon.runner_client import self_check


def test_the_deep_check_command_line(tmp_path):
    assert self_check.check_argv("/py", "") == ["/py", "-m", "runner", "check"]
    report = tmp_path / "self-check.json"
    assert self_check.check_argv("/py", "/port", report) == [
        "/py", "-m", "runner", "check", "--pixal3d-dir", "/port", "--backend", "pixal3d",
        "--deep", "--report", str(report)]


def test_the_report_is_a_new_file_in_the_output_folder(tmp_path):
    first = self_check.report_path(tmp_path, now=0)
    assert first.parent == tmp_path and first.suffix == ".json" and not first.exists()
    first.write_text("{}")
    second = self_check.report_path(tmp_path, now=0)
    assert second != first and not second.exists() and second.stem.endswith("_2")


def test_a_deep_check_that_did_not_run_says_why():
    lines = self_check.deep_lines({"ran": False, "ok": False, "error": {
        "kind": "weights_missing", "message": "The Pixal3D weights are not there."}})
    assert lines == ["Deep check not run — weights_missing: The Pixal3D weights are not there."]
    failed = self_check.deep_lines({"ran": True, "ok": False, "error": {
        "message": "decoder differs (2.0e-02 > bound 0.0001)"}, "parts": [
        {"part": "decoder", "status": "differs", "agreement": 0.02,
         "port": {"seconds": 1.0, "memory": {"process": 2 ** 20}},
         "lean": {"seconds": 1.5, "memory": {"process": 2 ** 19}}}],
        "unchecked": ["MPS memory: no MPS"]})
    assert failed[0] == "Deep check FAILED: decoder differs (2.0e-02 > bound 0.0001)"
    assert failed[1] == "decoder: differs 2.0e-02 · port 1.0 s, process 1.0 MiB · lean 1.5 s, " \
                        "process 512.0 KiB"
    assert failed[2] == "not checked: MPS memory: no MPS"
