"""stdin is read only with --cancel-on-stdin-eof: the runner inside a
shell ``while read`` loop leaves the loop's input alone and every line gets its job; the
Blender add-on's command line asks for the stdin cancel."""
from __future__ import annotations

import shlex
import shutil
import subprocess


def test_runner_inside_a_shell_while_read_loop(rt, shared_images, tmp_path):
    """``cat list | while read f; do python -m runner "$f" …; done``: both images are done
    (before the fix the first run ate the list and cancelled itself: 'stdin closed')."""
    names = []
    for p in shared_images[:2]:
        shutil.copy(p, tmp_path / p.name)
        names.append(p.name)
    (tmp_path / "list.txt").write_text("".join(n + "\n" for n in names))
    script = (f'cat list.txt | while read f; do {shlex.quote(rt.PY)} -m runner "$f" '
              '-o "out/$f.glb"; echo "rc=$?" >&2; done')
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=rt.env(),
                          capture_output=True, text=True, timeout=300)
    events = rt.parse(proc.stdout)
    finals = [e for e in events if e["event"] in ("result", "error")]
    assert [e["event"] for e in finals] == ["result", "result"], (finals, proc.stderr[-2000:])
    assert proc.stderr.count("rc=0") == 2
    for n in names:
        assert (tmp_path / "out" / f"{n}.glb").read_bytes()[:4] == b"glTF"


def test_addon_command_line_asks_for_the_stdin_cancel(tmp_path):
    """The add-on closes stdin to cancel, so its command line must opt in
    (blender_addon/runner_client/config.py)."""
    from blender_addon.runner_client import job_spec as job
    from runner.commands.cli import build_parser

    spec = job.JobSpec(image=tmp_path / "a.png", output=tmp_path / "a.glb",
                       trace=tmp_path / "a.trace.jsonl")
    ns = build_parser().parse_args(spec.argv("/py")[3:])
    assert ns.cancel_on_stdin_eof is True


def test_stdin_closed_at_once_without_the_opt_in_is_not_cancelled(rt, shared_images, tmp_path):
    """A run with stdin closed at once and without --cancel-on-stdin-eof is not cancelled (the
    hidden --ignore-stdin no-op, kept for older command lines, is gone)."""
    out = tmp_path / "a.glb"
    proc = subprocess.run([rt.PY, "-m", "runner", str(shared_images[0]), "-o", str(out)],
                          input="", capture_output=True, text=True,
                          env=rt.env(), cwd=rt.REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert rt.parse(proc.stdout)[-1]["event"] == "result" and out.exists()
