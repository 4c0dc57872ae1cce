"""A damaged batch manifest: kept beside it under a new name, and rebuilt from what the folder
proves — each GLB whose trace ends in the ``result`` for that very GLB. A manifest that is gone
(deleted: the natural "start clean" step), holds no records, or lacks the record of an image
whose trace is there is rebuilt (those records) the same way when the folder has batch traces,
so the images already done are skipped rather than refused as ``output_exists``.

A batch item's trace (``OUTDIR/<name>.trace.jsonl``) begins with the item's ``hello``
(``mode: "batch_item"``, ``image``, ``output``, and — in traces of this version on —
``sha256`` of the input
and the ``options`` that shape the GLB) and, when the job succeeded, ends with its ``result``
(``output``, ``seconds``, ``peak``, ``warnings``). Such a pair is rebuilt as a ``done`` entry,
so the resumed batch skips that image exactly as it would have with the intact manifest. A
trace without ``sha256``/``options`` (an older runner) gives an entry without them: that image
runs again, replacing only its own GLB (never an ``output_exists`` failure). Anything else —
a failed or cut-off trace, a GLB that is gone — is recorded ``failed`` with its trace (so the
image runs again and may replace that trace), and anything that is not a batch item's trace
is left out.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from meshfacts.errors import RunnerError
from runner.batch import MANIFEST_VERSION

TRACE_SUFFIX = ".trace.jsonl"


def kept_name(path: Path) -> Path:
    """A free name beside ``path`` for the damaged file: ``manifest.json.damaged-<UTC time>``
    (``-2``, ``-3`` … when taken)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    candidate = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 2
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
        n += 1
    return candidate


def _first_and_last(trace: Path) -> tuple[dict | None, dict | None]:
    """The first and the last JSON object of a trace (None where a line is not one)."""
    first = last = None
    try:
        with open(trace, encoding="utf-8", errors="surrogateescape") as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = None
                if i == 0:
                    first = obj
                last = obj
    except OSError:
        return None, None
    return (first if isinstance(first, dict) else None,
            last if isinstance(last, dict) else None)


def entry_from_trace(trace: Path) -> tuple[str, dict] | None:
    """``(image file name, manifest entry)`` for a batch item's trace (its ``hello`` names
    the image and the output), else None. The output is taken to be the GLB of that name beside
    the trace (a batch writes both into OUTDIR; the folder may have been moved or copied since
    the trace was written). The entry is ``done`` when the trace's last line is the ``result``
    for that output and the GLB exists; otherwise ``failed`` (the trace's own
    ``error`` when it ends with one), which still attributes the trace to the batch, so the
    image runs again and replaces it."""
    hello, result = _first_and_last(trace)
    if not hello or hello.get("event") != "hello" or hello.get("mode") != "batch_item":
        return None
    image, output = hello.get("image"), hello.get("output")
    if not (isinstance(image, str) and isinstance(output, str)):
        return None
    result = result or {}
    recorded, output = output, str(trace.parent / Path(output).name)  # the folder may have moved
    if result.get("event") != "result" or result.get("output") != recorded \
            or not os.path.isfile(output):
        error = {k: result.get(k) for k in ("kind", "message", "hint", "exit_code")} \
            if result.get("event") == "error" else \
            {"kind": None, "message": "rebuilt from its trace: no finished GLB", "hint": None,
             "exit_code": None}
        return Path(image).name, {"image": image, "output": output, "trace": str(trace),
                                  "status": "failed", "error": error, "rebuilt": True}
    warnings = result.get("warnings")
    entry = {"image": image, "output": output, "trace": str(trace), "status": "done",
             "seconds": result.get("seconds"), "peak": result.get("peak"), "error": None,
             "sha256": hello.get("sha256"), "options": hello.get("options"),
             "finished": result.get("t"), "warnings": warnings if isinstance(warnings, list)
             else [], "rebuilt": True}
    return Path(image).name, entry


def rebuild_entries(folder: Path, known: frozenset[str] = frozenset()) -> dict:
    """Every entry :func:`entry_from_trace` gives for the traces in ``folder`` (by image
    name; a ``done`` one wins over a ``failed`` one for the same image), leaving out the traces
    named in ``known`` (file names a manifest's records already name: not read again)."""
    entries: dict = {}
    for trace in sorted(folder.glob(f"*{TRACE_SUFFIX}")):
        if trace.name in known:
            continue
        found = entry_from_trace(trace)
        if found is not None and (found[0] not in entries or found[1]["status"] == "done"):
            entries[found[0]] = found[1]
    return entries


def _say(line: str) -> None:
    """One ``runner: …`` line on stderr; a closed or broken stderr must not fail the batch."""
    try:
        print(f"runner: {line}", file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def _done_count(entries: dict) -> int:
    return sum(1 for e in entries.values() if e["status"] == "done")


def recover_records(path: Path, data: dict) -> dict:
    """``data`` (the manifest as read: ``{}`` when ``path`` does not exist) with the records it
    lacks rebuilt from the batch traces in ``path``'s folder (:func:`rebuild_entries`; its own
    records are kept as they are), said in one stderr line; ``data`` unchanged when no trace
    there is of an image it lacks (a new output folder, an intact manifest). Call under the
    folder's lock; the caller writes the result."""
    images = data.get("images") if isinstance(data.get("images"), dict) else {}
    known = frozenset(Path(e["trace"]).name for e in images.values()
                      if isinstance(e, dict) and isinstance(e.get("trace"), str))
    entries = {name: entry for name, entry in rebuild_entries(path.parent, known).items()
               if name not in images}
    if not entries:
        return data
    if images:
        why = f"had no record of {len(entries)} image(s) whose traces are there"
    else:
        why = "has no image records" if data else "is missing"
    _say(f"the manifest {path} {why}; rebuilt {_done_count(entries)} finished image(s) from "
         f"the GLBs and traces in {path.parent}")
    return {**data, "version": data.get("version", MANIFEST_VERSION),
            "images": {**images, **entries}}


def recover(path: Path, why: str) -> dict:
    """Keep the damaged manifest ``path`` beside it (renamed, said on stderr) and return the
    manifest rebuilt from the folder (``{"version": 1, "images": …, "rebuilt_from": …}``); the
    caller writes it. Call under the folder's lock. Raises ``RunnerError('output_unwritable')``
    when the damaged file cannot be renamed (then nothing was changed)."""
    kept = kept_name(path)
    try:
        os.rename(path, kept)
    except OSError as exc:
        raise RunnerError("output_unwritable", f"The manifest {path} is damaged ({why}) and "
                          f"cannot be set aside as {kept.name} ({exc.strerror or exc}).",
                          "Move the damaged manifest away yourself, then run again.") from None
    entries = rebuild_entries(path.parent)
    _say(f"the manifest {path} is damaged ({why}); kept as {kept.name}; rebuilt "
         f"{_done_count(entries)} finished image(s) from the GLBs and traces in {path.parent}")
    return {"version": MANIFEST_VERSION, "images": entries, "rebuilt_from": str(kept)}
