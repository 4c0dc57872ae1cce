"""Render headless.py's ``--preview`` in a process of its own, so that a cancel is prompt.

``bpy.ops.render.render()`` blocks the calling thread until the render ends, holding Python's
interpreter: a Python signal handler in that process runs only afterwards (35 s at 4096 px,
minutes at 8192 px with a software renderer), Python threads do not run meanwhile, and the
Python API has no call that breaks a running render (``bpy.app.handlers.render_cancel`` only
reports one). ``headless.py`` therefore saves the scene to a private folder and runs this script
on it; on Ctrl-C or SIGTERM it kills this process's group and removes the folder.

Two ways to run it (``headless.py`` picks the one it runs in)::

    python preview_render.py SCENE.blend OUT FORMAT PARENT_PID        (the bpy module)
    blender -b SCENE.blend -P preview_render.py -- OUT FORMAT PARENT_PID

``OUT`` is written in ``FORMAT`` (``ImageFormatSettings.file_format``, e.g. ``PNG``). Exit 0
with ``OUT`` written; 1 with one line, the reason, in ``OUT.error`` (a render or save Blender
refused) and no ``OUT``. When ``PARENT_PID`` is no longer this process's parent at the end
(headless.py was killed without a chance to stop it), ``OUT``'s folder (headless.py's private
one, with the scene copy) is removed instead.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

#: the line on stderr just before the render starts (tests wait for it).
RENDERING = "image-to-mesh: preview: rendering"


def render(out: Path, fmt: str, parent: int) -> int:
    """Render the open scene to ``out`` in ``fmt``; returns the exit status (see the module)."""
    import bpy

    scene = bpy.context.scene
    print(RENDERING, file=sys.stderr, flush=True)
    try:
        bpy.ops.render.render()  # into the "Render Result" image, no file yet
        scene.render.image_settings.file_format = fmt
        # save_render writes exactly this path (no suffix appended), with the scene's colour
        # management, like write_still does.
        bpy.data.images["Render Result"].save_render(filepath=str(out), scene=scene)
    except (RuntimeError, KeyError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if reason.startswith("Error: "):
            reason = reason[len("Error: "):]
        out.with_name(out.name + ".error").write_text(reason, encoding="utf-8")
        return 1
    if os.getppid() != parent:  # headless.py is gone: remove its private folder, as it would
        shutil.rmtree(out.parent, ignore_errors=True)
        return 1
    return 0


def main(argv: list[str]) -> int:
    """``argv``: ``[SCENE.blend] OUT FORMAT PARENT_PID`` (the scene is absent when Blender has
    opened it already, ``blender -b SCENE.blend -P``)."""
    import bpy

    if len(argv) == 4:
        bpy.ops.wm.open_mainfile(filepath=argv[0])
        argv = argv[1:]
    out, fmt, parent = argv
    return render(Path(out), fmt, int(parent))


if __name__ == "__main__":
    args = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else sys.argv[1:]
    sys.exit(main(args))
