"""The port's own lines about files that are the adapter's temporaries, kept from the user.

The port prints where it wrote things (``[Checkpoint] Saved mesh to PATH``: ``generate_mps.py``
at 0be9e69a) because in its own command line those are the user's files. Under the adapter the
hand-over ``.npz`` is a private temporary, deleted moments later: a path the user cannot find
tells them nothing. Every other line the port prints passes through as it is printed.
"""
from __future__ import annotations

import contextlib
import io
import sys
from typing import Iterator


class _LineFilter(io.TextIOBase):
    """A text stream that forwards whole lines to ``target`` except those naming ``hidden``
    with one of ``prefixes``; a partial line waits for its end (or ``flush``)."""

    def __init__(self, target, prefixes: tuple[str, ...], hidden: str):
        super().__init__()
        self._target, self._prefixes, self._hidden = target, prefixes, hidden
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._forward(line + "\n")
        return len(text)

    def _forward(self, line: str) -> None:
        if line.startswith(self._prefixes) and self._hidden in line:
            return
        self._target.write(line)

    def flush(self) -> None:
        if self._pending:
            self._forward(self._pending)
            self._pending = ""
        self._target.flush()


@contextlib.contextmanager
def hide_port_lines(prefixes: tuple[str, ...], hidden: str) -> Iterator[None]:
    """Inside the block, the lines the port prints on stdout that start with one of
    ``prefixes`` and name ``hidden`` (a temporary's path or folder) are dropped; every other
    line passes through unchanged, a line at a time. ``sys.stdout`` is restored on exit."""
    stream = _LineFilter(sys.stdout, prefixes, hidden)
    with contextlib.redirect_stdout(stream):
        try:
            yield
        finally:
            stream.flush()
