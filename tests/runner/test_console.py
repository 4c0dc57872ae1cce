"""The runner's stdout for a person (``runner/commands/console.py``): the real ``python -m
runner`` with its stdout on a pseudo-terminal (``os.openpty``) prints progress lines and no
JSON; ``--json`` there, and a pipe always, give the protocol's events; a batch prints one line
per image."""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import threading
import time

from runner.commands.console import ProgressView, batch_line, guard_words

from .conftest import PY, REPO, env, run_runner

IMAGES = REPO / "tests" / "data" / "images"
GOBLIN = IMAGES / "typical_humanoid_goblin.png"


def run_at_terminal(args: list, timeout: float = 120, environ: dict | None = None,
                    terminal: str = "stdout") -> tuple[int, list[str], str]:
    """Run ``python -m runner ARGS`` with stdout (``terminal="stderr"``: stderr) on a
    pseudo-terminal and the other stream on a pipe (``environ``: its environment, default the
    runner tests' ``env()``); returns the exit status, the terminal's lines (its ``\\r\\n``
    undone) and the other stream's text."""
    master, slave = os.openpty()
    streams = {"stdout": slave, "stderr": subprocess.PIPE} if terminal == "stdout" else \
        {"stdout": subprocess.PIPE, "stderr": slave}
    proc = subprocess.Popen([PY, "-m", "runner", *map(str, args)], stdin=subprocess.DEVNULL,
                            env=environ or env(), cwd=REPO, **streams)
    os.close(slave)
    errors: list[bytes] = []
    piped = proc.stderr if terminal == "stdout" else proc.stdout
    reader = threading.Thread(target=lambda: errors.append(piped.read()), daemon=True)
    reader.start()
    out, deadline = bytearray(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every holder of the terminal's other end has closed it
                break
            if not chunk:
                break
            out += chunk
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    reader.join(10)
    text = out.decode("utf-8", "replace").replace("\r\n", "\n")
    return code, text.splitlines(), b"".join(errors).decode("utf-8", "replace")


def _is_event(line: str) -> bool:
    try:
        obj = json.loads(line)
    except ValueError:
        return False
    return isinstance(obj, dict) and "event" in obj


def test_a_terminal_gets_a_progress_line_per_stage_and_no_json(tmp_path):
    code, lines, stderr = run_at_terminal([GOBLIN, "-o", tmp_path / "g.glb"])
    assert code == 0, stderr
    assert lines, stderr
    assert not any(_is_event(line) for line in lines), lines
    assert not any(line.lstrip().startswith("{") for line in lines), lines
    assert lines[0] == f"{GOBLIN.name} → {tmp_path / 'g.glb'} (builtin)"
    for n, stage in enumerate(["matte", "shape", "texture", "export"], 1):
        assert f"[{n}/4] {stage}" in lines, lines
        done = [line for line in lines if line.startswith(f"[{n}/4] {stage} done ")]
        assert len(done) == 1, lines
    # a stage the sampler measured names its peak in binary units (a stage shorter than the
    # memory events' quarter second may have none)
    assert any(" done " in line and ", peak " in line and "iB" in line for line in lines), lines
    assert "runner: wrote" in stderr  # the result's line stays on stderr
    assert (tmp_path / "g.glb").stat().st_size > 0


def test_events_to_a_file_at_a_terminal_still_show_progress_on_stderr(tmp_path):
    """``python -m runner IMG -o OUT > events.ndjson`` at a terminal: the events go to stdout
    as the protocol says, and the person at the terminal still sees a line per stage and the
    verdict on stderr (before, nothing until the end)."""
    code, lines, stdout = run_at_terminal([GOBLIN, "-o", tmp_path / "g.glb"], terminal="stderr")
    assert code == 0, lines
    events = [json.loads(line) for line in stdout.splitlines()]
    assert events[0]["event"] == "hello" and events[-1]["event"] == "result"
    for n, stage in enumerate(["matte", "shape", "texture", "export"], 1):
        assert f"[{n}/4] {stage}" in lines, lines
    assert lines.index("[4/4] export") < next(i for i, line in enumerate(lines)
                                               if line.startswith("runner: wrote")), lines
    code, lines, stdout = run_at_terminal([GOBLIN, "-o", tmp_path / "j.glb", "--json"],
                                          terminal="stderr")
    assert code == 0 and not any(line.startswith("[1/4]") for line in lines), lines


def test_json_at_a_terminal_gives_the_events(tmp_path):
    code, lines, stderr = run_at_terminal([GOBLIN, "-o", tmp_path / "g.glb", "--json"])
    assert code == 0, stderr
    events = [json.loads(line) for line in lines]  # every line is an event
    assert events[0]["event"] == "hello" and events[-1]["event"] == "result"


def test_a_pipe_gets_the_events_as_the_protocol_says(tmp_path):
    """A pipe is not a terminal: stdout is the NDJSON stream (parse_stdout checks each line),
    in the protocol's order, with the same kinds as ever — and ``--json`` changes nothing."""
    plain = run_runner([GOBLIN, "-o", tmp_path / "a.glb"])
    forced = run_runner([GOBLIN, "-o", tmp_path / "b.glb", "--json"])
    for run in (plain, forced):
        assert run.returncode == 0, run.stderr
        kinds = run.kinds()
        assert kinds[0] == "hello" and kinds[1] == "input" and kinds[-1] == "result"
        assert set(kinds) == {"hello", "input", "guard", "stage", "ready", "progress",
                              "memory", "result"}, set(kinds)
        assert [e["stage"] for e in run.events if e["event"] == "stage"] == \
            ["matte", "shape", "texture", "export"]
    assert [e for e in plain.kinds() if e != "memory"] == \
        [e for e in forced.kinds() if e != "memory"]


def test_a_usage_error_at_a_terminal_is_one_stderr_line(tmp_path):
    code, lines, stderr = run_at_terminal([GOBLIN, "-o", tmp_path / "g.glb", "--seed", "x"])
    assert code == 2
    assert lines == [], lines
    assert "runner: usage:" in stderr


def test_a_batch_at_a_terminal_prints_one_line_per_image(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(GOBLIN, src / "a.png")
    (src / "b.png").write_bytes(b"not a picture")
    code, lines, stderr = run_at_terminal(["batch", src, "-o", tmp_path / "out"])
    assert code == 5, stderr  # one image failed
    assert not any(_is_event(line) for line in lines), lines
    items = [line for line in lines if line[:1].isdigit()]
    assert len(items) == 2, lines
    assert items[0].startswith("1/2 a.png done ") and ", peak " in items[0], items
    assert items[1].startswith("2/2 b.png failed (not_an_image) "), items
    # run again: the done image is skipped, said so
    code, lines, stderr = run_at_terminal(["batch", src, "-o", tmp_path / "out"])
    assert "1/2 a.png skipped (done before)" in lines, lines


def test_an_export_at_a_terminal_names_the_asset_and_its_steps(tmp_path):
    from standin.sphere_asset import make_sphere_asset

    asset = make_sphere_asset(tmp_path / "ball.asset.npz", subdivisions=3, resolution=32)
    code, lines, stderr = run_at_terminal(["export", asset, "-o", tmp_path / "ball.glb",
                                           "--texture-size", "512"])
    assert code == 0, stderr
    assert not any(_is_event(line) for line in lines), lines
    assert lines[0] == f"ball.asset.npz → {tmp_path / 'ball.glb'} (export)"
    assert lines[1].startswith("asset: 1,280 faces, 642 vertices, ") and "planned peak" in lines[1]
    assert "[1/1] export" in lines and lines[-1].startswith("[1/1] export done "), lines
    assert any(line.startswith("[1/1] export · bake") for line in lines), lines


def test_guard_waiting_words():
    event = {"event": "guard", "state": "waiting", "reason": "available 31 % < 40 %",
             "readings": {"available": 31 * 2**30, "total": 100 * 2**30},
             "thresholds": {"wait_free": {"required": 40 * 2**30, "percent": 40.0}}}
    assert guard_words(event) == "waiting: 31 % free, needs 40 %"
    need = {**event, "thresholds": {"need": {"required": 6 * 2**30, "percent": None}}}
    assert guard_words(need) == "waiting: 31.0 GiB free, needs 6.0 GiB"
    busy = {**event, "thresholds": {}, "reason": "busy: 2 other jobs"}
    assert guard_words(busy) == "waiting: busy: 2 other jobs"
    assert guard_words({**event, "state": "started"}) is None


def test_progress_lines_are_paced_and_name_step_and_memory():
    now = [0.0]
    view = ProgressView(clock=lambda: now[0])
    view.lines({"event": "hello", "mode": "single", "image": "/a/g.png", "output": "/a/g.glb",
                "backend": "pixal3d"})
    assert view.lines({"event": "stage", "stage": "sparse", "index": 1, "count": 5,
                       "t": 10.0}) == ["[2/5] sparse"]
    view.lines({"event": "memory", "stage": "sparse", "footprint": 2**30, "peak": 3 * 2**30,
                "stage_peak": 2 * 2**30})
    step = {"event": "progress", "stage": "sparse", "fraction": 0.48, "step": 12, "steps": 25}
    assert view.lines(step) == []  # within PROGRESS_EVERY of the stage's line
    now[0] = 2.5
    assert view.lines(step) == ["[2/5] sparse · step 12/25 · 48 % · 1.0 GiB, peak 3.0 GiB"]
    now[0] = 3.0
    assert view.lines(step) == []
    assert view.lines({"event": "stage", "stage": "bake", "parent": "sparse", "index": 0,
                       "count": 2}) == ["[2/5] sparse · bake · step 12/25 · 48 % · 1.0 GiB, "
                                        "peak 3.0 GiB"]
    assert view.lines({"event": "result", "t": 14.25}) == ["[2/5] sparse done 4.2 s, peak "
                                                           "2.0 GiB"]


def test_batch_line_words():
    assert batch_line({"index": 3, "count": 12, "image": "/in/orc.png", "status": "done",
                       "seconds": 12.34, "peak": int(1.2 * 2**30)}) == \
        "3/12 orc.png done 12.3 s, peak 1.2 GiB"
    assert batch_line({"index": 4, "count": 12, "image": "/in/x.png", "status": "failed",
                       "seconds": 0.1, "error": {"kind": "not_an_image"}}) == \
        "4/12 x.png failed (not_an_image) 0.1 s"


def test_batch_lines_count_images_as_they_finish():
    """A cluster's nodes finish in any order: the line's k/N is how many have finished, not
    the image's place in the folder (which read 3/3, 2/3, 1/3 — a countdown)."""
    view = ProgressView()
    view.lines({"event": "hello", "mode": "batch", "input_dir": "/in", "output_dir": "/out",
                "backend": "builtin"})
    order = [(3, "a.png", "done"), (2, "c.png", "failed"), (1, "b.jpg", "done")]
    lines = [view.lines({"event": "batch_item", "index": index, "count": 3,
                         "image": f"/in/{name}", "status": status, "seconds": 1.0, "peak": 0,
                         "error": {"kind": "image_truncated"}})[0]
             for index, name, status in order]
    assert [line.split(" ")[:3] for line in lines] == [
        ["1/3", "a.png", "done"], ["2/3", "c.png", "failed"], ["3/3", "b.jpg", "done"]]
