"""``python -m stageload.pixal3d run|check|compare``.

- ``run IMAGE -o OUT.glb [--pixal3d-dir DIR] [--model-path P] [--device D] [--load staged|eager]
  [--pipeline-type T] [--seed N] [--texture-size N] [--fov RAD] [--steps N]
  [--keep-resident BYTES] [--working-memory lean|port] [--fingerprint FOLDER] [--trace FILE]
  [--no-rng-restore]
  [--no-direct-load] [--port-arg=OPTION ...]``:
  one image through the port; events as JSON lines on stdout (and in ``--trace``); everything the
  port itself prints goes to stderr. With ``--trace`` this process also samples its own footprint
  (10 Hz) into the trace, so ``python -m stageload summary|plot`` work on it.
- ``check [--pixal3d-dir DIR] [--static]``: compare the port's sources with the commits the
  adapter was checked against (``ast`` only), then (without ``--static``) import the port and
  check every name it relies on (no weights read); prints JSON. Exit 0 when usable, 3 when the
  port's code drifted from what the adapter relies on (``drift`` names every item), 1 when the
  folder is missing or not a port.
- ``compare A B``: two fingerprint folders; exit 0 identical, 1 different, 2 unusable input.

Errors are one line on stderr with what to do, never a traceback (exit 2 usage, 1 failure).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from meshfacts.choices import DEFAULT_SEED, DEFAULT_TEXTURE_SIZE, SHARED_OPTIONS, TEXTURE_SIZES

#: ``check`` exit statuses by the ``PortError`` subclass it reports (None: usable).
CHECK_EXIT = {None: 0, "PortMissing": 1, "PortVersionError": 3}


def _size(text: str) -> int:
    """argparse type for ``--keep-resident``: bytes (``1000000000``) or a size such as ``1G``
    (:func:`meshfacts.units.parse_size`, binary multiples)."""
    from meshfacts.units import parse_size
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _shared_type(entry: dict):
    """argparse ``type`` of a ``choices.SHARED_OPTIONS`` entry's value: a whole number in its
    range (``int``), bytes or a size (``size``); None for choices and switches."""
    if entry["kind"] == "size":
        return _size
    if entry["kind"] != "int":
        return None
    low, high, unit = entry.get("low"), entry.get("high"), entry.get("unit", "")

    def whole(text: str) -> int:
        try:
            value = int(text.replace(",", "").replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value:,} must be from {low:,} to {high:,} {unit}")
        return value

    return whole


def _add_shared(group, entry: dict) -> None:
    """One ``choices.SHARED_OPTIONS`` entry as an option of ``run`` (``--`` + its name)."""
    flag, help_text = "--" + entry["name"].replace("_", "-"), entry["help"]
    if entry["kind"] == "switch":
        group.add_argument(flag, dest=entry["name"], action="store_true", help=help_text)
        return
    if entry.get("default") is not None:
        help_text += f" (default: {entry['default']})"
    for advice in entry.get("advice", {}).values():
        help_text += f". {advice}"
    group.add_argument(flag, dest=entry["name"], default=entry.get("default"),
                       choices=entry.get("choices"), type=_shared_type(entry),
                       metavar=entry.get("metavar"), help=help_text.replace("%", "%%"))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m stageload.pixal3d",
                                     description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="one image through the staged (or eager) Pixal3D pipeline")
    run.add_argument("image")
    run.add_argument("-o", "--output", required=True, help="GLB to write (must not exist)")
    run.add_argument("--pixal3d-dir", default=None,
                     help="Pixal3D-mac folder (default $PIXAL3D_DIR)")
    run.add_argument("--model-path", default=None,
                     help="the port's --model-path (default its MODEL_PATH)")
    run.add_argument("--device", default=None, help="mps, cuda or cpu (default mps when available)")
    run.add_argument("--seed", type=int, default=DEFAULT_SEED,
                     help=f"the port's seed (default {DEFAULT_SEED}, the product's)")
    run.add_argument("--texture-size", type=int, default=DEFAULT_TEXTURE_SIZE,
                     choices=TEXTURE_SIZES,
                     help=f"base-colour texture side (default {DEFAULT_TEXTURE_SIZE}, the "
                          "product's)")
    run.add_argument("--fov", type=float, default=None,
                     help="manual field of view in radians (skips MoGe-2)")
    run.add_argument("--steps", type=int, default=None,
                     help="sampler steps for every stage (port default)")
    run.add_argument("--fingerprint", default=None, help="folder for latent hashes and copies")
    run.add_argument("--trace", default=None, help="JSONL trace file to write (must not exist)")
    run.add_argument("--no-direct-load", action="store_true",
                     help="build and read models on the CPU, then move them (not straight to the "
                          "device)")
    run.add_argument("--no-rng-restore", action="store_true",
                     help="control run: do not restore RNG after loads")
    run.add_argument("--port-arg", action="append", default=[], metavar="OPTION",
                     help="an option for the port's own parser, e.g. --port-arg=--low-vram "
                          "(repeat; "
                          "refused before loading when this mode cannot honour it: "
                          "docs/pixal3d.md)")
    shared = run.add_argument_group("options shared with the runner's pixal3d backend "
                                    "(choices.SHARED_OPTIONS; export levers: unset = the port's "
                                    "own)")
    for entry in SHARED_OPTIONS:
        _add_shared(shared, entry)
    check = sub.add_parser("check", help="validate a port folder without loading weights")
    check.add_argument("--pixal3d-dir", default=None)
    check.add_argument("--static", action="store_true",
                       help="read the sources only (ast): no imports, no torch, no port "
                            "dependencies")
    compare = sub.add_parser("compare", help="compare two fingerprint folders")
    compare.add_argument("a")
    compare.add_argument("b")
    return parser


def main(argv=None) -> int:
    ns = _parser().parse_args(argv)
    if ns.command == "check":
        from stageload.pixal3d.port.open import check_port, static_report
        report = static_report(ns.pixal3d_dir) if ns.static else check_port(ns.pixal3d_dir)
        print(json.dumps(report, indent=1))
        return CHECK_EXIT.get(report["error"], 1)
    if ns.command == "compare":
        from .fingerprint import compare
        try:
            report = compare(ns.a, ns.b)
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for key, entry in report["entries"].items():
            state = ("identical" if entry["equal"]
                     else f"DIFFERENT (max abs diff {entry['max_abs_diff']})")
            print(f"{key}: {state}" + (f" — {entry['note']}" if entry["note"] else ""))
        print("identical" if report["identical"] else "different")
        return 0 if report["identical"] else 1
    return _run(ns)


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to file descriptor ``fd`` (``os.write`` may write part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _PortOutputToStderr:
    """For the duration of a run, everything the port prints goes to stderr: ``sys.stdout`` is
    replaced by ``sys.stderr`` and file descriptor 1 is pointed at descriptor 2 (``os.dup2``), so
    prints from native code and child processes go there too. ``events_fd`` is a duplicate of the
    original stdout, where the JSON event lines go. Restores both on exit; ``close()`` closes
    ``events_fd``.

    Why: stdout is documented to carry only JSON lines (one event each), which a caller parses
    line by line; the port's own ``print``s (``[Export] ...``) would break that."""

    def __enter__(self):
        sys.stdout.flush()
        self.events_fd = os.dup(1)
        self._saved_fd1 = os.dup(1)
        self._saved_stdout = sys.stdout
        sys.stderr.flush()
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        return self

    def emit(self, event: dict) -> None:
        """One event as a JSON line on the original stdout."""
        _write_all(self.events_fd, (json.dumps(event, default=str) + "\n").encode("utf-8"))

    def __exit__(self, *exc) -> None:
        try:
            sys.stderr.flush()
        finally:
            sys.stdout = self._saved_stdout
            os.dup2(self._saved_fd1, 1)
            os.close(self._saved_fd1)

    def close(self) -> None:
        os.close(self.events_fd)


def _run_options(ns):
    """``run``'s options → ``options.RunOptions`` (the export levers resolved);
    ``PortError``-free, ``ValueError`` for a bad combination (reported as a usage error by the
    caller)."""
    from stageload.pixal3d.export.run import ExportOptions
    from stageload.pixal3d.options import RunOptions
    export = ExportOptions(decimation_target=ns.decimation_target,
                           remesh=None if ns.remesh is None else ns.remesh == "on",
                           remesh_resolution=ns.remesh_resolution,
                           profile=None if ns.export_profile == "port" else ns.export_profile,
                           allow_dense_grid_sample=ns.allow_dense_grid_sample).resolve()
    return RunOptions(pipeline_type=ns.pipeline_type, load=ns.load,
                      keep_resident=ns.keep_resident, prefetch=ns.prefetch == "on",
                      working_memory=ns.working_memory, seed=ns.seed,
                      texture_size=ns.texture_size, export=export)


def _usage_problem(ns) -> str | None:
    """What is wrong with ``run``'s output, input or options, for one ``error:`` line (None:
    nothing)."""
    if Path(ns.output).exists():
        return f"{ns.output} exists; choose another output (nothing is overwritten)"
    if not Path(ns.image).is_file():
        return f"input image {ns.image} not found"
    try:
        _run_options(ns)
    except ValueError as exc:
        return str(exc)
    return None


def _run(ns) -> int:
    from ..events import fan_out
    from ..meter import Sampler
    from ..trace import TraceWriter
    from .adapter import Pixal3DRun
    from .errors import EmptyMeshError, PortError

    problem = _usage_problem(ns)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    trace = None
    try:
        trace = TraceWriter(ns.trace) if ns.trace else None
    except (FileExistsError, FileNotFoundError) as exc:
        print(f"error: cannot write the trace: {exc}", file=sys.stderr)
        return 2
    # With a trace, this process samples its own footprint into it (10 Hz, from a thread of this
    # process): the runner samples its worker from outside; here there is no outside process.
    sampler = Sampler(os.getpid(), trace, interval=0.1) if trace is not None else None

    def sample_at_stage_edges(event: dict) -> None:
        # The sampling thread shares this process's interpreter, so a busy stage can starve it;
        # one sample at each edge (after `stage`: the end of the previous window; after `ready`:
        # the start of the new one) gives every stage at least one reading.
        if sampler is not None and event.get("event") in ("stage", "ready"):
            sampler.sample_now()
    out = _PortOutputToStderr()
    try:
        with out:
            if sampler is not None:
                sampler.start()
            try:
                run = Pixal3DRun(ns.pixal3d_dir, _run_options(ns), device=ns.device,
                                 model_path=ns.model_path,
                                 events=fan_out(out.emit, trace, sample_at_stage_edges),
                                 preserve_rng=not ns.no_rng_restore,
                                 fingerprint=ns.fingerprint, direct_to_device=not ns.no_direct_load,
                                 port_args=ns.port_arg)
                result = run.generate(ns.image, ns.output, fov=ns.fov, steps=ns.steps)
                run.close()
            except (PortError, EmptyMeshError) as err:
                print(f"error: {err.message}\nhint: {err.hint}", file=sys.stderr)
                return 1
            finally:
                if sampler is not None:
                    sampler.stop()
                if trace is not None:
                    trace.close()
            out.emit({"event": "result", **result})
    finally:
        out.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
