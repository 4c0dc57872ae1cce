"""The port's lines naming the adapter's temporaries are dropped, a line at a time, and every
other line the port prints passes through unchanged and in order."""
from __future__ import annotations

import contextlib
import io

from stageload.pixal3d.export.port_lines import hide_port_lines


def test_only_the_lines_naming_the_temporary_are_dropped():
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        with hide_port_lines(("[Export]",), "/out/.g.job-1/g.glb"):
            print("[Export] Decimating to 1000 faces")
            print("[Export] Textured GLB saved to /out/.g.job-1/g.glb")
            print("[Export] Textured GLB saved to /elsewhere/g.glb")  # not the temporary
            print("progress ", end="")  # a partial line waits for its end
            print("50 %")
            print("tail without newline", end="")
        # the partial last line is flushed on exit, and stdout is the caller's again
        print("\nafter")
    assert shown.getvalue().splitlines() == [
        "[Export] Decimating to 1000 faces",
        "[Export] Textured GLB saved to /elsewhere/g.glb",
        "progress 50 %",
        "tail without newline",
        "after"]
