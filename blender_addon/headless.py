"""Headless Image to Mesh: image → GLB → Blender scene → .blend and/or preview PNG.

Two ways to run it, same options::

    blender -b -P headless.py -- IMAGE [--blend OUT.blend] [--glb OUT.glb] [--preview OUT.png]
                                       [--resolution 64..8192] [--python PATH] [job options]
    python headless.py IMAGE …          (an interpreter with the ``bpy`` module, e.g. the .venv)

A folder instead of an image runs the folder batch. ``--help`` lists every option; the command
itself is ``background/cli.py`` (docs/blender.md, "Headless").
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

#: The add-on package's folder: ``blender_addon`` in a checkout, the extension's folder when
#: installed.
PACKAGE_DIR = Path(__file__).resolve().parent

def main(argv: list[str] | None = None) -> int:
    """Run the headless job (``background.cli.main``); returns the exit status.

    Blender's ``-P`` and a plain interpreter run this file as a script, outside its package: the
    package is imported from its parent folder under its folder's name."""
    if str(PACKAGE_DIR.parent) not in sys.path:
        sys.path.insert(0, str(PACKAGE_DIR.parent))
    # the package's name is its folder's (blender_addon, or the installed extension's), known
    # only here, at run time: no import statement can name it
    cli = importlib.import_module(f"{PACKAGE_DIR.name}.background.cli")
    return cli.main(argv)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
