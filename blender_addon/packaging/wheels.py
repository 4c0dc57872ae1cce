"""The wheels the extension bundles, per platform: ``python -m blender_addon.packaging.wheels``.

Build-time only (not shipped in the zip). Blender installs the wheels an extension lists in its
manifest's ``wheels`` (https://docs.blender.org/manual/en/latest/advanced/extensions/python_wheels.html)
into its own ``extensions/.local/lib/python3.11/site-packages``; the add-on then runs the runner
with Blender's own Python and that folder on ``PYTHONPATH`` (docs/blender.md), so the built-in
backend needs no virtual environment.

The pinned list is ``blender_addon/packaging/wheels.txt``. Each is fetched unmodified from the
package
index with ``pip download --only-binary :all: --no-deps --python-version 3.11 --platform …``
into ``.wheels/<platform>/`` (a cache: a wheel already there is not fetched again), so the same
list always gives the same files. This needs the package index (once per platform); the build
itself (``blender_addon.packaging.build``) only reads the cache.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = Path(__file__).with_name("wheels.txt")
CACHE = REPO / ".wheels"
PYTHON_VERSION = "3.11"  # Blender 4.2 to 5.0 bundle Python 3.11

#: Blender's platform names (manifest ``platforms``) → pip ``--platform`` tags accepted for it.
#: macOS 12 is the oldest SciPy 1.13 builds for on arm64.
PLATFORMS: dict[str, tuple[str, ...]] = {
    "linux-x64": ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                  "manylinux_2_12_x86_64", "manylinux2010_x86_64"),
    "macos-arm64": ("macosx_12_0_arm64", "macosx_11_0_arm64", "macosx_10_9_universal2",
                    "macosx_10_13_universal2"),
}
#: Blender platforms no zip is built for, and why (said by the build and the fetcher).
UNSUPPORTED = {
    "windows-x64": "the runner needs POSIX: it starts each job in a process group and session "
                   "of its own, hands it a pipe descriptor, and stops the whole group "
                   "(docs/runner.md, Notes and limits), none of which Windows has — an "
                   "installed zip would fail at the first Generate",
}


def host_platform() -> str:
    """This machine's Blender platform name (a key of :data:`PLATFORMS`). Raises
    :class:`WheelError` on a platform the extension has no wheels for."""
    import platform as _platform

    machine = _platform.machine().lower()
    name = {("linux", "x86_64"): "linux-x64", ("darwin", "arm64"): "macos-arm64",
            ("win32", "amd64"): "windows-x64"}.get((sys.platform, machine))
    if name in UNSUPPORTED:
        raise WheelError(f"{name} is not supported: {UNSUPPORTED[name]}")
    if name is None:
        raise WheelError(f"no wheels for this platform ({sys.platform} {machine}); the "
                         f"extension is built for {', '.join(PLATFORMS)}")
    return name


class WheelError(RuntimeError):
    """A wheel is missing or cannot be fetched; the message says what to run."""


def requirements(path: Path = REQUIREMENTS) -> list[tuple[str, str]]:
    """``(name, version)`` pairs from the pinned list (``name==version`` lines; ``#`` comments).
    Raises :class:`WheelError` for a line that is not an exact pin."""
    out = []
    for line in path.read_text("utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.\-+]+)", line)
        if not m:
            raise WheelError(f"{path}: {line!r} is not an exact pin (name==version)")
        out.append((m.group(1), m.group(2)))
    return out


def _normal(name: str) -> str:
    """A distribution name as wheel file names spell it (PEP 427: runs of -_. become _)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def find(name: str, version: str, folder: Path) -> Path | None:
    """The wheel of ``name==version`` in ``folder``, or None."""
    prefix = f"{_normal(name)}-{version}-"
    for f in sorted(folder.glob("*.whl")) if folder.is_dir() else ():
        if f.name.lower().startswith(prefix.lower()):
            return f
    return None


def wheels_for(platform: str, cache: Path = CACHE) -> list[Path]:
    """Every pinned wheel for ``platform`` from the cache, in list order. Raises
    :class:`WheelError` naming the command that fetches a missing one."""
    if platform in UNSUPPORTED:
        raise WheelError(f"{platform} is not supported: {UNSUPPORTED[platform]}")
    if platform not in PLATFORMS:
        raise WheelError(f"unknown platform {platform!r}; known: {', '.join(PLATFORMS)}")
    found, missing = [], []
    for name, version in requirements():
        f = find(name, version, cache / platform)
        (found if f else missing).append(f or f"{name}=={version}")
    if missing:
        raise WheelError(f"wheels for {platform} missing from {cache / platform}: "
                         f"{', '.join(missing)}. Run `python -m blender_addon.packaging.wheels "
                         f"--platform {platform}` (needs the package index) or `make wheels`.")
    return found


def download(platform: str, cache: Path = CACHE) -> list[Path]:
    """Fetch the pinned wheels for ``platform`` into ``cache/platform`` (those already there are
    kept) and return them. Raises :class:`WheelError` when pip fails."""
    dest = cache / platform
    dest.mkdir(parents=True, exist_ok=True)
    todo = [f"{n}=={v}" for n, v in requirements() if find(n, v, dest) is None]
    if todo:
        tags = [a for tag in PLATFORMS[platform] for a in ("--platform", tag)]
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:",
               "--no-deps", "--python-version", PYTHON_VERSION, "--implementation", "cp",
               *tags, "--dest", str(dest), *todo]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise WheelError(f"pip download for {platform} failed: "
                             f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    return wheels_for(platform, cache)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--platform P`` (repeatable; default every platform). Prints the wheels."""
    ap = argparse.ArgumentParser(prog="python -m blender_addon.packaging.wheels",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--platform", action="append", choices=sorted(PLATFORMS) + ["host"],
                    help="Blender platform name, or host for this machine's (default: all)")
    ap.add_argument("--cache", type=Path, default=CACHE, help="wheel folder (default .wheels)")
    ns = ap.parse_args(argv)
    try:
        for platform in ns.platform or list(PLATFORMS):
            platform = host_platform() if platform == "host" else platform
            for f in download(platform, ns.cache):
                print(f"{platform}\t{f.name}\t{f.stat().st_size}")
    except WheelError as exc:
        print(f"wheels: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
