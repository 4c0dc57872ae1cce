"""Record the system readings of a real swap run-away, for test_decisions.py.

Run as root on Linux:
``.venv/bin/python tests/guard/record_swap_run.py tests/guard/data/swap_run.jsonl``.
A hog limited to 256 MB of RAM by a memory cgroup grows to 1.5 GB in 128 MB steps, so about
1.25 GB of it goes to swap; the meter's ``system_memory()`` is read every 0.1 s and each reading
is written as a ``sample`` line (docs/ARCHITECTURE.md, "Trace"; footprint fields omitted).
No guard runs here: this is the run a guard must stop.
"""
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from swap_env import swap_environment  # noqa: E402

from stageload.meter import system_memory  # noqa: E402

PROCS = str(Path(__file__).resolve().parent / "procs.py")


def main(out: str) -> None:
    lines = []
    with swap_environment() as (procs_file, notes):
        hog = subprocess.Popen(
            ["sh", "-c", f"echo $$ > {procs_file} && exec {sys.executable} {PROCS} hog "
                         f"{128 * 1024**2} {1536 * 1024**2} 0.1"],
            stdout=subprocess.PIPE, text=True)
        end = time.monotonic() + 30
        try:
            while time.monotonic() < end:
                mem = system_memory()
                lines.append({"event": "sample", "t": round(time.time(), 3),
                              "available": mem.available, "total": mem.total,
                              "swap": mem.swap_used, "swap_total": mem.swap_total,
                              "pressure": mem.pressure})
                if (mem.swap_used and len(lines) > 5 and lines[-6]["swap"] == mem.swap_used
                        and mem.swap_used > 1024**3):
                    break  # swap stopped growing: the hog reached its cap
                time.sleep(0.1)
        finally:
            hog.kill()
            hog.wait()
    with open(out, "x") as handle:
        note = {"event": "note", "text": f"recorded by record_swap_run.py: {notes}"}
        handle.write(json.dumps(note) + "\n")
        for line in lines:
            handle.write(json.dumps(line) + "\n")
    top = max(sample["swap"] for sample in lines)
    print(f"{len(lines)} samples, swap {lines[0]['swap']} -> {top} bytes", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
