"""``python -m bench.own_peak OUT.json -m MODULE [ARGS...]`` (or ``SCRIPT.py [ARGS...]``): run a
Python module or script in this process and, when it ends (normally, by ``sys.exit`` or by an
exception), write ``{"peak_bytes": N, "exit": CODE}`` to ``OUT.json``: the process's own kernel
high-water mark of resident memory (``stageload.meter.high_water_mark``: Linux ``VmHWM``, macOS
the footprint's lifetime maximum), in bytes.

Why not the parent's ``os.wait4`` / ``getrusage`` ``ru_maxrss``: on Linux a process's
``ru_maxrss`` keeps the high-water mark of the memory it replaced at ``execve``, and a child that
Python starts (``vfork`` + ``exec``) replaces its parent's memory, so the child's figure is at
least the parent's own peak (measured here: a child of a parent that had touched 1.5 GB reported
1,535 MB against a ``VmHWM`` of 11 MB). Measured from a big parent such as a full pytest session,
two children's figures then come out equal whatever they did. ``VmHWM`` belongs to the new
memory alone.
"""
from __future__ import annotations

import json
import os
import runpy
import sys


def main(argv: list[str]) -> int:
    """Run ``argv[1:]`` as ``python`` would and write the peak to ``argv[0]``; returns the exit
    code (``SystemExit``'s code, 1 for an uncaught exception, which is re-raised)."""
    if len(argv) < 2 or (argv[1] == "-m" and len(argv) < 3):
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    out, target = argv[0], argv[1:]
    code = 0
    try:
        if target[0] == "-m":
            sys.argv = [target[1], *target[2:]]
            runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(target)
            runpy.run_path(target[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        code = 1
        raise
    finally:
        from stageload.meter import high_water_mark
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"peak_bytes": high_water_mark(os.getpid()), "exit": code}, f)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
