"""The deep check's closing lines for a person (``runner.commands.deep.environment_lines``):
how memory was measured is said once — in the "not checked" line where MPS memory could not be
read, on its own line where it was."""
from __future__ import annotations

from runner.commands.deep import environment_lines

CPU = "CPU: the process's resident memory at its kernel peak over the part's start"


def _deep(unchecked: list[str], measured: str) -> dict:
    return {"backends": {"attention": "naive", "convolution": "none"}, "metal": [],
            "unchecked": unchecked, "parts": [{"part": "conditioning",
                                               "memory_measured": measured}],
            "device": "cpu", "seconds": 1.0}


def test_how_memory_was_measured_is_said_once():
    lines = environment_lines(_deep([f"MPS memory: no MPS; measured instead: {CPU}"], CPU))
    assert sum(CPU in line for line in lines) == 1
    assert not any(line.startswith("memory:") for line in lines)
    mps = "MPS: the allocator's current and driver-allocated bytes"
    lines = environment_lines(_deep([], mps))
    assert f"memory: {mps}" in lines and lines[-1] == "device cpu, 1.0 s in all"
