"""What the command line tells a person: every failure as
``runner: KIND: message — hint`` on stderr (usage and batch-level errors too), a success as
``runner: wrote …``, a raised texture size said aloud, one guard admission line without repeated
figures, ``input.path`` absolute like ``hello.image``, ``memory`` events 4 per second as
documented, a cancelled batch item ``cancelled`` in its event and the manifest, and the
decompression-bomb limit the runner really applies."""
from __future__ import annotations

import json
import re
import signal

import pytest
from PIL import Image

from meshfacts.errors import KINDS, RunnerError
from runner.images.reading import probe_image
from runner.job.memory import MemoryTracker

HUMAN = re.compile(r"^runner: (\w+): (.+) — (.+)$", re.MULTILINE)


def _human(stderr: str) -> list[tuple[str, str, str]]:
    return HUMAN.findall(stderr)


def test_a_usage_error_is_one_human_line(rt, tmp_path):
    fin = rt.run(["--texture-size", "abc", tmp_path / "a.png", "-o", tmp_path / "a.glb"])
    assert fin.returncode == 2 and fin.last()["kind"] == "usage"
    ((kind, message, hint),) = _human(fin.stderr)
    assert kind == "usage" and "--texture-size" in message and hint == KINDS["usage"].hint


@pytest.mark.parametrize("case", ["missing", "empty", "file"])
def test_a_batch_level_error_is_said_on_stderr(rt, character, tmp_path, case):
    folder = {"missing": tmp_path / "nowhere", "empty": tmp_path / "empty",
              "file": character}[case]
    if case == "empty":
        folder.mkdir()
    fin = rt.run(["batch", folder, "-o", tmp_path / "out"])
    last = fin.last()
    assert last["event"] == "error" and last["kind"] == "input_missing"
    assert _human(fin.stderr) == [("input_missing", last["message"], last["hint"])]


def test_a_success_says_what_it_wrote_and_the_small_texture_is_said_aloud(rt, character, tmp_path):
    """Relative paths from another folder; --texture-size 7 (the builtin makes 512 at least)."""
    fin = rt.run([character.name, "-o", "out.glb", "--texture-size", "7"], cwd=tmp_path)
    assert fin.returncode == 0, fin.stderr[-2000:]
    hello, result = fin.first("hello"), fin.last()
    assert fin.first("input")["path"] == hello["image"] == str(character)
    assert result["info"]["texture_size"] == 512
    assert "--texture-size 7 is below the builtin backend's smallest texture; a 512 px " \
           "texture is made instead" in fin.stderr
    assert re.search(rf"^runner: wrote {re.escape(result['output'])} \(.+\), peak .+ s; trace ",
                     fin.stderr, re.MULTILINE), fin.stderr
    (start,) = [line for line in fin.stderr.splitlines() if line.startswith("guard: start")]
    assert start.count("available") == 1, start


def test_memory_events_come_four_a_second_from_ten_hz_samples():
    now = [0.0]
    tracker = MemoryTracker(clock=lambda: now[0])
    events = 0
    for k in range(100):  # 10 s of samples at 10 Hz
        now[0] = k / 10
        events += tracker.on_sample({"t": now[0], "footprint": 1000 + k, "hwm": None}) is not None
    assert events == 40


def test_the_protocol_documents_the_memory_rate_sent(repo_root):
    text = (repo_root / "runner" / "PROTOCOL.md").read_text(encoding="utf-8")
    assert "`memory` (4 per second" in text and "3.3" not in text


def test_a_cancelled_batch_item_is_cancelled_in_its_event_and_the_manifest(rt, character, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    Image.open(character).save(folder / "a.png")
    out = tmp_path / "out"
    live = rt.Live(["batch", folder, "-o", out])
    try:
        live.wait_for("stage")
        live.proc.send_signal(signal.SIGTERM)
        fin = live.finish(timeout=60)
    finally:
        live.kill()
    (item,) = [e for e in fin.events if e["event"] == "batch_item"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert item["status"] == manifest["images"]["a.png"]["status"] == "cancelled"
    assert fin.last()["kind"] == "cancelled"


def test_the_decompression_bomb_message_quotes_the_limit_applied(tmp_path):
    bomb = tmp_path / "bomb.png"
    Image.new("1", (12000, 12000), 0).save(bomb)  # 144 M pixels, above 2 x 89.5 M too
    with pytest.raises(RunnerError) as info:
        probe_image(bomb)
    assert info.value.kind == "image_too_large"
    assert f"{Image.MAX_IMAGE_PIXELS:,}" in info.value.message
    assert "144,000,000 pixels" in info.value.message
    assert f"{2 * Image.MAX_IMAGE_PIXELS}" not in info.value.message.replace(",", "")


def test_the_builtin_texture_floor_is_the_backends_own():
    from runner import backends
    from runner.backends.builtin.texture import MIN_TEXTURE_SIZE

    assert backends.get("builtin").texture_floor == MIN_TEXTURE_SIZE


def test_the_success_line_says_how_the_export_decimated():
    """``decimation_words`` reads the result's ``info.export.decimation`` (the bounded export
    engine's facts; the pieced path end to end: tests/export_engine/test_decimate_pieces.py)
    and says nothing for a result without them or with a bad shape."""
    from runner.commands.cli import decimation_words

    def final(decimation):
        return {"event": "result", "info": {"export": {"decimation": decimation}}}

    assert decimation_words(final({"method": "pieces", "pieces": 4, "twins": 0})) \
        == ", decimated in 4 pieces"
    assert decimation_words(final({"method": "one call", "pieces": 1, "twins": 6})) \
        == ", decimated in one call (6 twin faces dropped)"
    for bad in ({"method": "pieces", "pieces": "4"}, {"method": "other"}, None, [1]):
        assert decimation_words(final(bad)) == ""
    assert decimation_words({"event": "result", "info": {"texture_size": 512}}) == ""
    assert decimation_words({"event": "result", "info": None}) == ""


def test_a_misspelt_command_is_suggested(rt, tmp_path):
    fin = rt.run(["bacth", tmp_path], cwd=tmp_path)
    assert fin.returncode == 2 and fin.last()["kind"] == "usage"
    ((kind, message, hint),) = _human(fin.stderr)
    assert "did you mean batch?" in message and f"python -m runner batch {tmp_path}" in hint
    # a file of that name is still the image a single run was given: no suggestion
    (tmp_path / "bacth").write_bytes(b"not an image")
    fin = rt.run(["bacth", "-o", tmp_path / "a.glb"], cwd=tmp_path)
    assert "did you mean" not in fin.stderr and fin.last()["kind"] != "usage"
