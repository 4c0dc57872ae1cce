"""What the "Image to Mesh" panel draws for a job: :class:`PanelView`, made from a
``state.JobState`` by :func:`make_view`. Pure Python: no bpy.

Units: sizes for people through the project's one byte formatter
(``meshfacts.units.format_size``: binary multiples labelled KiB/MiB/GiB, as the guard,
``stageload summary`` and the memory chart print them); durations from seconds.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import facts as _facts
from .status import (
    ACTIVE,
    CANCELLED,
    DONE,
    FAILED,
    FINISHED,
    IDLE,
    IMPORTING,
    RUNNING,
    STARTING,
    WAITING,
)


def human_bytes(n: float | int | None) -> str:
    """A byte count for people, as the whole project writes it (``meshfacts.units.format_size``:
    binary multiples labelled KiB/MiB/GiB, e.g. ``1288490189 -> "1.2 GiB"``); ``"unknown"`` for
    None."""
    return _facts.format_size(n)


def human_seconds(s: float | None) -> str:
    """Format a duration in seconds: ``75.2 -> "1:15"``, ``4.25 -> "4.2 s"``."""
    if s is None:
        return "–"
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(int(round(s)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


@dataclass
class PanelView:
    """Everything the panel draws for a job, as plain strings and numbers.

    ``stage_rows``: list of (stage name, status, seconds text); ``progress``: 0..1 over the whole
    run; the ``*_text`` fields are ready to print ("" = draw nothing).
    """
    status: str
    headline: str
    stage_rows: list[tuple[str, str, str]]
    progress: float
    progress_text: str
    memory_text: str
    swap_text: str
    guard_text: str
    elapsed_text: str
    result_text: str
    error_text: str
    hint_text: str
    note_text: str = ""  # the runner's warnings, and a newer protocol version
    #: stage name → its sub-steps as (name, status, seconds text), e.g. export's remesh, bake
    substep_rows: dict = field(default_factory=dict)


HEADLINES = {IDLE: "Ready", STARTING: "Starting the runner…", WAITING: "Waiting for memory",
             IMPORTING: "Importing the mesh", DONE: "Done", FAILED: "Failed",
             CANCELLED: "Cancelled"}


def make_view(st, now: float | None = None) -> PanelView:
    """What the panel draws for the ``state.JobState`` ``st`` now (``now`` in seconds, default:
    the current time)."""
    now = time.time() if now is None else now
    rows = [row_view(r, now) for r in st.stages]
    sub_rows = {parent: [row_view(r, now) for r in subs] for parent, subs in st.substeps.items()}
    elapsed = ""
    if st.started is not None:
        end = st.ended if st.ended is not None else now
        elapsed = f"elapsed {human_seconds(max(0.0, end - st.started))}"
    err = hint = ""
    if st.error is not None:
        err = st.error.get("message") or st.error.get("kind", "")
        hint = st.error.get("hint") or ""
    if st.status == RUNNING:
        headline = f"Running: {st.stage}" if st.stage else "Running"
    else:
        headline = HEADLINES[st.status]
    return PanelView(st.status, headline, rows, st.progress(), _progress_text(st),
                     _memory_text(st), _swap_text(st), guard_line(st), elapsed,
                     _result_text(st), err, hint,
                     " ".join([st.stall_text, *st.runner_warnings, st.protocol_note]).strip(),
                     sub_rows)


def _progress_text(st) -> str:
    """The bar's text: ``export (4/4) 50 % · bake``, ``done``, ``starting…`` …"""
    if st.status in (IMPORTING, DONE):
        return "done" if st.status == DONE else "importing"
    idx = next((i for i, r in enumerate(st.stages) if r.name == st.stage), None)
    if st.stage is not None and idx is not None:
        text = f"{st.stage} ({idx + 1}/{len(st.stages)}) {st.stage_fraction * 100:.0f} %"
        if st.substep and st.status not in FINISHED:
            text += f" · {st.substep}"
        return text
    # Between spawn (or admission) and the first stage the worker is still starting.
    return {WAITING: "waiting for memory", STARTING: "starting…",
            RUNNING: "starting…"}.get(st.status, "")


def _memory_text(st) -> str:
    """``footprint 1.2 GiB · peak 2.0 GiB · export peak 1.9 GiB`` ("" before any figure)."""
    if st.footprint is None and st.peak is None:
        return ""
    text = f"footprint {human_bytes(st.footprint)} · peak {human_bytes(st.peak)}"
    if st.stage_peak is not None and st.stage:
        text += f" · {st.stage} peak {human_bytes(st.stage_peak)}"
    return text


def _swap_text(st) -> str:
    """``swap 1.0 GiB (+512.0 MiB since start) · available 9.0 GiB of 24.0 GiB``."""
    swap = ""
    if st.swap is not None:
        swap = f"swap {human_bytes(st.swap)}"
        if st.swap_start is not None and st.swap != st.swap_start:
            grow = st.swap - st.swap_start
            swap += f" ({'+' if grow > 0 else ''}{human_bytes(grow)} since start)"
    if st.available is not None:
        avail = f"available {human_bytes(st.available)}"
        if st.total:
            avail += f" of {human_bytes(st.total)}"
        swap = f"{swap} · {avail}" if swap else avail
    return swap


def _result_text(st) -> str:
    """The output path, time, peak and the input's notes, once the result is in."""
    if st.result is None or st.status not in (IMPORTING, DONE):
        return ""
    secs = st.result.get("seconds")
    text = f"{st.output}" + (f" in {human_seconds(secs)}" if secs else "")
    if st.peak is not None:
        text += f", peak {human_bytes(st.peak)}"
    text += coverage_text(st.result)
    notes = getattr(st, "input_notes", None)
    if notes:
        text += f" (input: {'; '.join(notes)})"
    return text


def coverage_text(result: dict) -> str:
    """``", texture 99.97 % from the voxels"`` from the result's
    ``info.export.voxel_coverage`` (the bounded export engine's share, 0..1, of the used
    texels that found a voxel; runner/PROTOCOL.md); ``""`` when it has none or it is not a
    share."""
    info = result.get("info") if isinstance(result, dict) else None
    export = info.get("export") if isinstance(info, dict) else None
    share = export.get("voxel_coverage") if isinstance(export, dict) else None
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        return ""
    return f", texture {share * 100:.2f} % from the voxels"


def guard_line(st) -> str:
    """The guard's state for people, e.g. ``"waiting: 31 % free, needs 40 %"``: the threshold
    comes from the guard event's structured ``thresholds`` field (runner/PROTOCOL.md), never
    from its wording."""
    if st.guard_state is None:
        return ""
    r = st.guard_readings
    avail, total = r.get("available"), r.get("total")
    free = (f"{100.0 * avail / total:.0f} % free"
            if isinstance(avail, (int, float)) and isinstance(total, (int, float)) and total
            else "")
    need = threshold_text(st.guard_thresholds)
    need_txt = f"needs {need}" if need else ""
    if st.guard_state == "waiting":
        details = ", ".join(x for x in (free, need_txt) if x) or st.guard_reason
        return f"waiting: {details}" if details else "waiting"
    if st.guard_state == "started":
        return f"admitted{': ' + free if free else ''}"
    return f"{st.guard_state}: {st.guard_reason}".rstrip(": ")


def threshold_text(thresholds: dict) -> str:
    """The first blocking memory threshold of a guard event's ``thresholds`` (condition →
    ``{"required": bytes, "percent": percent of total or null}``) for people: ``40 %`` when it
    was set as a percentage, else its size (``9.5 GiB``); "" when there is none."""
    for entry in (thresholds or {}).values():
        if not isinstance(entry, dict):
            continue
        percent, required = entry.get("percent"), entry.get("required")
        if isinstance(percent, (int, float)) and not isinstance(percent, bool):
            return f"{percent:g} %"
        if isinstance(required, (int, float)) and not isinstance(required, bool):
            return human_bytes(required)
    return ""


def row_view(r, now: float) -> tuple[str, str, str]:
    """A stage or sub-step row as (name, status, seconds text) at ``now`` (seconds)."""
    if r.status == ACTIVE and r.started is not None:
        return r.name, r.status, human_seconds(max(0.0, now - r.started))
    return r.name, r.status, human_seconds(r.seconds) if r.seconds is not None else ""
