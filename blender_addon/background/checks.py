"""A single headless job's arguments and outputs, checked before anything runs
(``headless.py IMAGE …``): one readable image, outputs that destroy neither the input nor each
other, that exist only with ``--overwrite``, in folders that can be written. ``exit_code(kind)``
(``headless._exit``: the runner's exit status of an error kind) gives each refusal's status;
``headless.py`` reports a :class:`Refused` as its one error line, as it does the batch's
``folder.BatchFailed``.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


class Refused(Exception):
    """An argument or output refused: ``code`` the exit status (``headless.Failure`` reports
    it)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def _check_writable(folder: Path, exit_code) -> None:
    """Create ``folder`` (and its parents) when it is missing, as the runner does for its
    output; :class:`Refused` (exit 21) unless a file can then be created in it — checked by
    creating (and removing) one, since permission bits do not tell about read-only file
    systems, or about root."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        what = ("a file, not a folder" if isinstance(exc, FileExistsError)
                else exc.strerror or str(exc))
        raise Refused(f"Cannot create the output folder {folder} ({what}). Choose a folder "
                      "you can write to.", exit_code("output_unwritable")) from None
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise Refused(f"Cannot write to the output folder {folder}: {exc.strerror or exc}. "
                      "Choose a folder you can write to.", exit_code("output_unwritable")) from None


def _same_file(a: Path, b: Path) -> bool:
    """True when ``a`` and ``b`` (absolute, resolved) name one file: equal paths, or both exist
    and ``os.path.samefile`` says so (hard links, case-insensitive file systems)."""
    if a == b:
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_output_clashes(ns, exit_code) -> None:
    """Refuse (:class:`Refused`, exit 2, before anything runs) outputs that would destroy the
    input or each other: any of ``--glb``, ``--blend``, ``--preview`` and the trace the runner
    will write (``--trace``, else ``GLB.trace.jsonl`` next to ``--glb``) naming the input image,
    two of them naming one file, or a ``--blend`` name not ending in ``.blend``. ``--overwrite``
    replaces earlier outputs, never the source picture. Paths in ``ns`` must be resolved."""
    trace = ns.trace or (ns.glb.with_name(f"{ns.glb.stem}.trace.jsonl") if ns.glb else None)
    outputs = [(flag, p) for flag, p in (("--glb", ns.glb), ("--blend", ns.blend),
                                         ("--preview", ns.preview),
                                         ("--trace" if ns.trace else "the memory trace", trace))
               if p is not None]
    for flag, p in outputs:
        if _same_file(p, ns.image):
            raise Refused(f"{flag} {p} is the input image; --overwrite never replaces the "
                          "source picture. Choose another output name.", exit_code("usage"))
    if ns.blend and ns.blend.suffix.lower() != ".blend":
        got = f"a {ns.blend.suffix} file" if ns.blend.suffix else "a name without a suffix"
        raise Refused(f"--blend {ns.blend} is {got}; end the name in .blend (Blender's file "
                      "format; use --glb for a GLB).", exit_code("usage"))
    for i, (flag_a, a) in enumerate(outputs):
        for flag_b, b in outputs[i + 1:]:
            if _same_file(a, b):
                raise Refused(f"{flag_a} and {flag_b} both name {a}; give each output its own "
                              "file name.", exit_code("usage"))


def check_single(ns, config, exit_code) -> None:
    """Check a single job's arguments before anything runs: one image (not ``--cluster``),
    readable (``config.validate_image``); its outputs resolved, not clashing
    (:func:`check_output_clashes`), not existing unless ``--overwrite``, in writable folders.
    Sets ``ns.image`` and the output paths to their resolved forms. Raises :class:`Refused`
    (``usage``, ``input_missing``, ``output_exists``, ``output_unwritable`` statuses)."""
    if ns.cluster:
        raise Refused("--cluster runs a batch on a Ray cluster: give a folder of "
                      "images instead of one image (headless.py FOLDER --glb OUTDIR "
                      "--cluster ADDRESS).", exit_code("usage"))
    try:
        ns.image = config.validate_image(ns.image)
    except config.ConfigError as exc:
        raise Refused(str(exc), exit_code("input_missing")) from None
    ns.glb, ns.blend, ns.preview, ns.trace = (
        p.expanduser().resolve() if p else None
        for p in (ns.glb, ns.blend, ns.preview, ns.trace))
    check_output_clashes(ns, exit_code)
    outputs = [p for p in (ns.glb, ns.blend, ns.preview) if p]
    for p in outputs:  # every refusal before a folder is made
        if p.exists() and not ns.overwrite:
            raise Refused(f"{p} exists; choose another name or pass --overwrite.",
                          exit_code("output_exists"))
    for p in outputs:
        _check_writable(p.parent, exit_code)
