"""Build and drive the TEST-ONLY libSystem stand-in (libsystem_standin.c) so the macOS reader,
the Sampler and the guard run on Linux against XNU-shaped answers.

``build(out_dir)`` compiles two libraries with ``cc``: the full one and one without
``proc_reset_footprint_interval`` (a libSystem older than macOS 10.14). ``Standin`` writes the
state file the C library re-reads on every call and gives the environment that points the
reader (``STAGELOAD_MACOS_LIBSYSTEM``) and the library (``STAGELOAD_STANDIN_STATE``) at them.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "libsystem_standin.c"
GIB = 1024**3
PAGE = 16384  # Apple Silicon's kernel page size

#: The issue's Mac: 48 GiB, 4 GiB wired, 27 GiB internal (anonymous), 1 GiB of it purgeable,
#: 2 GiB in the compressor, 16 KiB pages. Activity Monitor's "Memory Used" is then
#: (27 - 1) + 4 + 2 = 32 GiB, so 16 GiB are available. The old reader's
#: kern.memorystatus_level counted active + inactive + free + speculative: 91 % here.
ISSUE_MAC = {
    "page_size": PAGE, "memsize": 48 * GIB, "memsize_usable": 48 * GIB, "level": 91,
    "pressure": 1, "wire": 4 * GIB // PAGE, "internal": 27 * GIB // PAGE,
    "purgeable": 1 * GIB // PAGE, "compressor": 2 * GIB // PAGE, "external": 9 * GIB // PAGE,
    "free": 5 * GIB // PAGE, "active": 20 * GIB // PAGE, "inactive": 18 * GIB // PAGE,
    "swap_total": 2 * GIB, "swap_avail": 2 * GIB, "swap_used": 0,
}


def compiler() -> str | None:
    """Path of ``cc`` (or ``gcc``/``clang``), None when this machine has no C compiler."""
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


def build(out_dir: Path) -> dict[str, Path]:
    """Compile the stand-in into ``out_dir``: ``{"full": path, "no_interval": path}``.
    Raises ``RuntimeError`` with the compiler's message when it fails."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc, clang) on PATH")
    built = {}
    for name, extra in (("full", []), ("no_interval", ["-DSTANDIN_NO_FOOTPRINT_INTERVAL"])):
        target = Path(out_dir) / f"libsystem_standin_{name}.so"
        done = subprocess.run([cc, "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-shared", "-fPIC",
                               "-O1", "-Wall", "-Werror", *extra, "-o", str(target), str(SOURCE)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"cc failed for the libSystem stand-in:\n{done.stderr}")
        built[name] = target
    return built


class Standin:
    """One stand-in "Mac": a library path and a state file (``key value`` lines)."""

    def __init__(self, library: Path, state: Path, values: dict | None = None):
        self.library = Path(library)
        self.state = Path(state)
        self.values: dict[str, int] = {}
        self.set(**(values or {}))

    def set(self, **values: int) -> None:
        """Change some values (``None`` removes a key: that sysctl then does not exist) and
        rewrite the state file in one rename, so a reader never sees half a file."""
        for key, value in values.items():
            if value is None:
                self.values.pop(key, None)
            else:
                self.values[key] = int(value)
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text("".join(f"{k} {v}\n" for k, v in self.values.items()))
        os.replace(tmp, self.state)

    def set_pid(self, pid: int, **values: int) -> None:
        """Per-process values: ``footprint``, ``lifetime_max``, ``interval_max``, ``zombie``,
        ``eperm``."""
        self.set(**{f"{key}.{pid}": value for key, value in values.items()})

    def environ(self, base: dict | None = None) -> dict:
        """``base`` (default ``os.environ``) plus the two variables that select the stand-in."""
        return dict(os.environ if base is None else base,
                    STAGELOAD_MACOS_LIBSYSTEM=str(self.library),
                    STAGELOAD_STANDIN_STATE=str(self.state))
