"""Image to Mesh — Blender extension (SPEC §2.6): a character image → a textured mesh.

The add-on starts ``python -m runner`` in a separate process (never importing torch, runner or
stageload into Blender), shows its stages and memory in View3D › Sidebar › Image to Mesh, and
imports the GLB. See docs/blender.md.

Importing this package does not import ``bpy``: ``python -m blender_addon.packaging.build`` and the
pure
modules (``state``, ``batch``, ``config``, ``process``) work in any Python. Blender calls
:func:`register` / :func:`unregister`.
"""


def register() -> None:
    """Register preferences, settings, operators and the panel (called by Blender)."""
    from .ui import addon
    addon.register()


def unregister() -> None:
    """Stop any running job, then unregister everything (called by Blender on disable)."""
    from .ui import addon
    addon.unregister()
