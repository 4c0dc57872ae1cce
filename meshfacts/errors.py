"""Every way a runner job can fail: error kind → exit code, a message for a person, a hint.

The table ``KINDS`` is the single source of the kinds and exit codes; ``runner/PROTOCOL.md``
tables the same list (a test checks they agree). A failure travels as ``RunnerError`` inside
the supervisor and the worker and leaves the process as one ``error`` event plus the exit code —
never as a traceback on stdout.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """One error kind: ``exit_code`` (int, the process's exit status), ``hint`` (default advice,
    what the person should do), ``summary`` (one line for the docs)."""

    exit_code: int
    hint: str
    summary: str


# Exit-code ranges: 1 internal, 2 usage, 3/4 the guard's own codes (stageload.guard), 5 batch,
# 10-19 the input (an image; 18 an export's asset), 20-29 output, 30-39 environment, 40-49 the
# run itself, 130 cancelled.
KINDS: dict[str, Kind] = {
    "internal": Kind(1, "This is a bug in the runner; please report it with the trace file and "
                        "the log on stderr.", "unexpected failure inside the runner"),
    "usage": Kind(2, "Run `python -m runner --help` for the options.",
                  "bad command line (also argparse's own errors)"),
    "guard_stopped": Kind(3, "Close other memory-hungry programs, or raise the guard's "
                             "--swap-budget / lower --kill-free, then run again.",
                          "the guard stopped the job: swap or available memory over budget"),
    "guard_timeout": Kind(4, "Free memory (or wait for the busy job to finish), or raise "
                             "--start-timeout, then run again.",
                          "the guard never admitted the job (not enough memory in time)"),
    "batch_failed": Kind(5, "See the manifest and the batch_item events for each failed image.",
                         "batch: at least one image failed (the others were done)"),
    "not_an_image": Kind(10, "Choose a PNG, JPEG or WebP file.",
                         "the file is not an image Pillow can read"),
    "input_missing": Kind(11, "Check the path; the file must exist and be readable.",
                          "the input file (or batch folder) does not exist"),
    "input_empty": Kind(12, "The file has zero bytes; export or copy the image again.",
                        "the input file has zero bytes"),
    "image_truncated": Kind(13, "The image file is cut short or damaged; export or download it "
                                "again.", "truncated or corrupt image data"),
    "image_too_large": Kind(14, "Scale the image down (to a few thousand pixels a side) and try "
                                "again.", "decompression bomb: more pixels than Pillow's limit"),
    "image_too_small": Kind(15, "Use a larger picture of the character (at least 32 × 32 px; a "
                                "few hundred pixels a side works best).",
                            "image smaller than 32 px on a side"),
    "image_transparent": Kind(16, "Every pixel is fully transparent; export the image with the "
                                  "character visible.", "fully transparent image"),
    "image_unsupported": Kind(17, "Convert the image to an 8-bit RGB or RGBA PNG and try again.",
                              "an image mode the runner cannot convert to RGBA"),
    "bad_asset": Kind(18, "Export the asset again (a Pixal3D run with --keep-asset, or the "
                          "port's --save-mesh), or raise --export-budget when it is too large.",
                      "the asset .npz for an export is not the port's saved asset, is damaged, or "
                      "is too large for the export budget"),
    "output_exists": Kind(20, "Choose another output name, or pass --overwrite to replace it.",
                          "the output file exists (and --overwrite was not given)"),
    "output_unwritable": Kind(21, "Choose an output folder you can write to.",
                              "the output folder cannot be created or written"),
    "disk_full": Kind(22, "Free disk space on the output drive (or choose another folder) and "
                          "run again.", "no space left on the output (or trace) drive"),
    "output_invalid": Kind(23, "Give an output path ending in .glb that is not a folder.",
                           "the output path is not a .glb file path"),
    "manifest_newer": Kind(24, "Use the newer runner for this output folder, or choose another "
                               "folder (-o); the manifest was left as it is.",
                           "batch: the folder's manifest was written by a newer runner"),
    "no_torch": Kind(30, "Install PyTorch into that interpreter, or point the runner at a Python "
                         "that has it.", "the worker's interpreter cannot import torch"),
    "backend_unavailable": Kind(31, "Run `python -m runner check` to see what each backend needs.",
                                "the chosen backend cannot run here"),
    "pixal3d_missing": Kind(32, "Pass --pixal3d-dir pointing to a Pixal3D-mac checkout with its "
                                "weights.", "the Pixal3D folder is missing or incomplete"),
    "pixal3d_version": Kind(33, "Use a Pixal3D-mac version this runner supports (see docs).",
                            "the Pixal3D folder is of an unknown version"),
    "missing_dependency": Kind(34, "Install the project's dependencies into that interpreter "
                                   "(pip install -e . or the Makefile's setup).",
                               "the interpreter lacks a package the runner needs (Pillow, "
                               "psutil…)"),
    "bad_weights": Kind(35, "The weight file named in the message is damaged or belongs to "
                            "another model version: delete it, download the Pixal3D weights "
                            "again, then run again.",
                        "a weight file is damaged (truncated, a bad header, empty, a folder or "
                        "unreadable) or does not fit its model"),
    "weights_missing": Kind(36, "Download the Pixal3D weights (run Pixal3D-mac once with internet "
                                "access, or `huggingface-cli download TencentARC/Pixal3D`), then "
                                "run again.",
                            "a weight file the run needs is not in the weights cache"),
    "cluster_unavailable": Kind(37, "Start the Ray head and the nodes (docs/cluster.md), check "
                                    "the address and the firewall, or install Ray into the "
                                    "runner's Python (pip install 'image-to-mesh[cluster]').",
                                "--cluster: Ray is not installed, or the cluster cannot be "
                                "reached or has no node that could run a job"),
    "cluster_auth": Kind(38, "Give the runner the cluster's token: copy ~/.ray/auth_token from "
                             "the head (or what `ray get-auth-token` prints there) to this "
                             "machine's ~/.ray/auth_token, or pass --cluster-token-file FILE "
                             "(docs/cluster.md).",
                         "batch/check --cluster: the cluster requires a token (RAY_AUTH_MODE="
                         "token) and none was found here, or it refused the one found, or the "
                         "token file cannot be read"),
    "worker_unstartable": Kind(39, "Check the interpreter the runner starts its worker with: "
                               "it must exist and be an executable Python (the message names "
                               "it; `python -m runner check` tries it).",
                               "the worker's interpreter could not be started at all (a "
                               "missing or non-executable file), whatever the job needs"),
    "backend_failed": Kind(40, "See the log on stderr and the trace; try another image or "
                               "backend.", "the backend raised an unexpected error"),
    "worker_killed": Kind(41, "The job was killed from outside (often the system running out of "
                              "memory); close other programs and run again.",
                          "the worker process was killed by a signal (runner killed)"),
    "worker_crashed": Kind(42, "See the log on stderr; run `python -m runner check`.",
                           "the worker exited without a result or an error"),
    "empty_matte": Kind(43, "No character could be separated from the background; use an image "
                            "with transparency or a plain background.",
                        "the matte (character silhouette) came out empty"),
    "background_not_plain": Kind(44, "Use an image with transparency (alpha), or one on a plain, "
                                     "single-colour background.",
                                 "no alpha and the border is not one plain colour to key out"),
    "export_refused": Kind(45, "Free memory or use a lighter export (--export-profile fit, a "
                               "smaller --texture-size or --decimation-target), or follow the "
                               "message's advice.",
                           "export refused before it started: it would not fit, or a lever "
                           "the port cannot honour"),
    "empty_mesh": Kind(46, "The model produced no surface. On a Mac this is usually the GPU "
                           "watchdog interrupting a long Metal kernel: retry with fewer steps, "
                           "close display-heavy apps, or try another image.",
                       "Pixal3D's decoder produced an empty mesh (the port stops there too)"),
    "out_of_memory": Kind(47, "Close other programs (or wait for the busy job to finish), or use a "
                              "smaller --texture-size, then run again.",
                          "the backend ran out of memory (an allocation failed)"),
    "resource_limit": Kind(48, "Raise the limit the message names (ulimit in the shell that "
                               "starts the runner), then run again.",
                           "a system limit was reached: open files, processes or threads"),
    "stalled": Kind(49, "The worker stopped moving. If it was stopped (state T: SIGSTOP, a "
                        "debugger), resume it with kill -CONT; if a stage legitimately runs "
                        "that long, raise --stall-timeout or leave it out.",
                    "--stall-timeout: the worker was stalled (stopped, or no CPU time and no "
                    "event) for that long"),
    "export_fallback": Kind(50, "The port's native export failed (the message says why): free "
                                "memory or disk space and run again, or run without "
                                "--strict-export to accept its fallback export.",
                            "--strict-export: the port's native export failed and it would "
                            "have written its fallback export instead"),
    "self_check_failed": Kind(51, "Run Pixal3D with --working-memory port until this is "
                                  "fixed, and report it with the check's --report file.",
                              "check --deep: a lean part's result differs from the port's "
                              "beyond its bound, or it failed on this port (the message names "
                              "the part)"),
    "cancelled": Kind(130, "The job was stopped on request; run it again when you want the "
                           "result.",
                      "cancelled: SIGTERM/SIGINT/SIGHUP, stdin closed, or the parent died"),
}


class RunnerError(Exception):
    """A failure with a kind from ``KINDS``, a ``message`` for a person (what happened) and a
    ``hint`` (what to do; defaults to the kind's hint). ``details`` (dict, JSON-serialisable)
    travels in the error event. Raises ``KeyError`` for an unknown kind."""

    def __init__(self, kind: str, message: str, hint: str | None = None, **details):
        if kind not in KINDS:
            raise KeyError(f"unknown error kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.hint = hint if hint is not None else KINDS[kind].hint
        self.details = details

    @property
    def exit_code(self) -> int:
        """The process exit status for this kind."""
        return KINDS[self.kind].exit_code

    def fields(self) -> dict:
        """The fields of the protocol's ``error`` event (without ``v``/``event``/``t``)."""
        out = {"kind": self.kind, "message": self.message, "hint": self.hint,
               "exit_code": self.exit_code}
        if self.details:
            out["details"] = self.details
        return out


def human_line(fields: dict) -> str:
    """The documented one-line form of an error for people, ``runner: KIND: message — hint``
    (runner/PROTOCOL.md), from an ``error`` event's fields or ``RunnerError.fields()``."""
    return f"runner: {fields.get('kind')}: {fields.get('message')} — {fields.get('hint')}"


def explain(fields: dict) -> None:
    """Print ``human_line(fields)`` on stderr (the protocol owns stdout); a closed or
    missing stderr is ignored."""
    try:
        print(human_line(fields), file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def exit_code(kind: str) -> int:
    """Exit status for ``kind``; ``KINDS['internal']`` for an unknown kind."""
    return KINDS.get(kind, KINDS["internal"]).exit_code
