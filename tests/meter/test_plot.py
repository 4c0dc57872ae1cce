"""The chart: written, a sensible PNG, stage names and run labels on it, no overwrite."""
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from stageload.plot import load_run, main, make_figure

FIXTURE = Path(__file__).with_name("fixtures") / "small_run.jsonl"


def _texts(fig) -> set[str]:
    out = set()
    for legend in fig.legends:
        out |= {t.get_text() for t in legend.get_texts()}
    for ax in fig.axes:
        out |= {t.get_text() for t in ax.texts}
        out |= {t.get_text() for t in ax.get_yticklabels()}
        legend = ax.get_legend()
        if legend:
            out |= {t.get_text() for t in legend.get_texts()}
    return out


def test_chart_is_written_and_readable(tmp_path, capsys):
    out = tmp_path / "chart.png"
    assert main([str(FIXTURE), "-o", str(out)]) == 0
    with Image.open(out) as img:
        assert img.format == "PNG"
        assert img.width >= 1000 and 500 <= img.height <= 2000
        colours = img.convert("RGB").getcolors(maxcolors=1_000_000)
        assert colours is not None and len(colours) > 50  # not a blank canvas
    assert 20_000 < out.stat().st_size < 2_000_000
    # refuses to replace an existing file without --force
    assert main([str(FIXTURE), "-o", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main([str(FIXTURE), "-o", str(out), "--force"]) == 0


def test_stage_names_and_labels_on_the_chart(tmp_path):
    second = tmp_path / "other.jsonl"
    second.write_text(FIXTURE.read_text().replace('"decode"', '"vae"'))
    fig = make_figure([load_run(FIXTURE), load_run(second, "run B")])
    texts = _texts(fig)
    for name in ("setup", "denoise", "decode", "vae"):
        assert name in texts
    assert any(t.startswith("small_run") for t in texts)
    assert any(t.startswith("run B") for t in texts)


def test_bad_input(tmp_path, capsys):
    assert main([str(tmp_path / "none.jsonl"), "-o", str(tmp_path / "c.png")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main([str(FIXTURE), "--label", "a", "--label", "b", "-o", str(tmp_path / "c.png")]) == 2
    empty = tmp_path / "nosamples.jsonl"
    empty.write_text('{"event": "stage", "t": 1, "stage": "s", "index": 0, "count": 1}\n')
    assert main([str(empty), "-o", str(tmp_path / "c.png")]) == 2
    assert "no samples" in capsys.readouterr().err
    assert not (tmp_path / "c.png").exists()
    assert main([str(FIXTURE), "-o", str(tmp_path / "c.bmp")]) == 2


def test_output_without_suffix_or_a_folder_is_refused(tmp_path, capsys):
    """``-o noext`` once wrote a PNG with no extension and exited 0; ``-o FOLDER --force`` exited
    1 with "Is a directory; choose a folder you can write to". Both are usage errors now (exit 2),
    with a hint naming a file that would do, and nothing is written."""
    noext = tmp_path / "noext"
    assert main([str(FIXTURE), "-o", str(noext)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stageload plot: ") and len(err.strip().splitlines()) == 1
    assert "no extension" in err and "noext.png" in err
    assert not noext.exists() and os.listdir(tmp_path) == []
    folder = tmp_path / "d1"
    folder.mkdir()
    for extra in ([], ["--force"]):
        assert main([str(FIXTURE), "-o", str(folder), *extra]) == 2
        err = capsys.readouterr().err
        assert err.strip() == (f"stageload plot: {folder} is a folder; give a file name such as "
                               f"{folder / 'chart.png'}")
        assert folder.is_dir() and os.listdir(folder) == []
    # the hinted names work; so does .svg in capitals
    assert main([str(FIXTURE), "-o", str(folder / "chart.png")]) == 0
    assert main([str(FIXTURE), "-o", str(tmp_path / "c.SVG")]) == 0
    assert (tmp_path / "c.SVG").read_bytes().lstrip().startswith((b"<?xml", b"<svg"))


def test_module_entry_point(repo_root, tmp_path):
    out = tmp_path / "m.png"
    done = subprocess.run([sys.executable, "-m", "stageload", "plot", str(FIXTURE), "-o", str(out)],
                          capture_output=True, text=True, cwd=repo_root, timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 20_000


def _unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process cannot create files in: a mode-555 folder for an ordinary user;
    for root (who ignores mode bits, as on this test machine) Linux's /sys, where creating a
    file fails with EACCES."""
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        return ro
    if not Path("/sys/kernel").is_dir():
        pytest.skip("root without /sys: no folder refuses writes")
    return Path("/sys")


def test_unwritable_output_and_unreadable_trace_are_one_line(tmp_path, capsys):
    """An output folder that refuses writes (the tester's read-only file system) is exit 1 with
    one line, and leaves no temporary file; a trace that cannot be read is exit 2 with one line."""
    folder = _unwritable_folder(tmp_path)
    before = set(os.listdir(folder))
    assert main([str(FIXTURE), "-o", str(folder / "x.png")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"stageload plot: cannot write {folder / 'x.png'}: ")
    assert len(err.strip().splitlines()) == 1 and "choose a folder" in err
    assert set(os.listdir(folder)) == before
    if Path("/proc/self/mem").exists():  # opens, then fails at offset 0 with EIO, even for root
        assert main(["/proc/self/mem", "-o", str(tmp_path / "y.png")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("stageload plot: cannot read /proc/self/mem: ")
        assert len(err.strip().splitlines()) == 1
        assert not (tmp_path / "y.png").exists()


def test_chart_permissions_follow_the_umask(tmp_path):
    """The chart is created like any new file (0o666 minus the umask), not ``-rw-------`` as a
    mkstemp file would be; checked with two umasks so the result cannot be a constant."""
    for umask, mode in ((0o022, 0o644), (0o002, 0o664)):
        old = os.umask(umask)
        try:
            out = tmp_path / f"chart_{umask:o}.png"
            assert main([str(FIXTURE), "-o", str(out)]) == 0
        finally:
            os.umask(old)
        assert stat.S_IMODE(out.stat().st_mode) == mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chart_2.png", "chart_22.png"]


def _crowded_trace(path: Path) -> Path:
    """A 10 s run whose first five stages last 0.05 s each (like Pixal3D's setup, preprocess,
    camera), then two long ones; samples at 10 Hz with a peak that reaches the top."""
    t0 = 1_000_000.0
    lines = []
    starts = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 6.0]
    names = ["setup", "preprocess", "camera", "condition", "upsample", "structure", "export"]
    for i, (s, name) in enumerate(zip(starts, names, strict=True)):
        lines.append({"event": "stage", "t": t0 + s, "stage": name, "index": i,
                      "count": len(names)})
        lines.append({"event": "ready", "t": t0 + s + 0.001, "stage": name, "resident_bytes": 0})
    for k in range(101):
        lines.append({"event": "sample", "t": t0 + k * 0.1, "pid": 1,
                      "footprint": (1 + (k == 50) * 2) * 1024**3, "hwm": None, "hwm_since": None,
                      "available": None, "total": None, "swap": None, "pressure": None})
    lines.sort(key=lambda e: e["t"])
    import json
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return path


def test_names_of_narrow_stages_do_not_overlap(tmp_path):
    fig = make_figure([load_run(_crowded_trace(tmp_path / "crowded.jsonl"))])
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    names = {"setup", "preprocess", "camera", "condition", "upsample", "structure", "export"}
    boxes = {t.get_text(): t.get_window_extent(renderer) for t in ax.texts if t.get_text() in names}
    assert set(boxes) == names
    overlapping = [(a, b) for a in boxes for b in boxes if a < b and boxes[a].overlaps(boxes[b])]
    assert overlapping == []
    frame = ax.get_window_extent(renderer)
    line_top = ax.transData.transform((0, 3.0))[1]  # the peak sample, 3 GiB (the y axis unit)
    for name, box in boxes.items():
        assert frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1, name  # inside the axes
        assert box.y0 > line_top, name  # above the curve: headroom grows with the rows
