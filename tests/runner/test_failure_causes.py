"""The cause of a backend's failure is kept: an out-of-memory error anywhere
in the exception's cause chain — torch's CPU allocator refusing a real allocation,
``torch.OutOfMemoryError`` — is reported as ``out_of_memory`` with its hint; a worker that
crashes with SIGSEGV is ``worker_crashed``, not "killed from outside"."""
from __future__ import annotations

import pytest
import torch

from meshfacts.errors import KINDS
from runner.worker.run import _classify


def _cpu_allocator_error() -> RuntimeError:
    """torch's real error for an allocation the CPU allocator cannot make (4 EiB)."""
    try:
        torch.empty(1 << 62, dtype=torch.uint8)
    except RuntimeError as exc:
        return exc
    pytest.fail("torch allocated 4 EiB")


def _wrapped(inner: BaseException, explicit: bool) -> RuntimeError:
    try:
        if explicit:
            raise RuntimeError("texture stage failed") from inner
        try:
            raise inner
        except BaseException:
            raise RuntimeError("texture stage failed")  # noqa: B904  implicit chaining is the case
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize("explicit", [True, False], ids=["from", "during-handling"])
def test_an_out_of_memory_error_wrapped_by_the_backend_keeps_its_kind(explicit):
    oom = _cpu_allocator_error()
    assert "can't allocate memory" in str(oom)
    err = _classify(_wrapped(oom, explicit), None)
    assert err.kind == "out_of_memory" and err.exit_code == KINDS["out_of_memory"].exit_code
    assert "texture stage failed" in err.message and "can't allocate memory" in err.message
    assert err.hint == KINDS["out_of_memory"].hint


@pytest.mark.parametrize("exc", [
    torch.OutOfMemoryError("MPS backend out of memory (MPS allocated: 17.50 GB, other "
                           "allocations: 1.20 GB, max allowed: 18.13 GB)."),
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB."),
    MemoryError(),
], ids=["mps", "cuda", "MemoryError"])
def test_torch_and_python_out_of_memory_errors_are_out_of_memory(exc):
    assert _classify(exc, None).kind == "out_of_memory"


def test_another_failure_names_its_root_cause():
    try:
        try:
            raise KeyError("weights.bin")
        except KeyError as inner:
            raise RuntimeError("loading failed") from inner
    except RuntimeError as exc:
        err = _classify(exc, None)
    assert err.kind == "backend_failed"
    assert "loading failed" in err.message and "KeyError: 'weights.bin'" in err.message


def test_a_cause_chain_with_a_cycle_ends():
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    assert _classify(a, None).kind == "backend_failed"


def test_a_worker_crashing_with_sigsegv_is_a_crash(rt, character, tmp_path):
    """A real invalid memory access in the worker (ctypes reads address 0)."""
    fin = rt.run([character, "-o", tmp_path / "out.glb"],
                 worker_hook="import ctypes; ctypes.string_at(0)")
    last = fin.last()
    assert last["kind"] == "worker_crashed" and fin.returncode == 42, fin.stderr[-2000:]
    assert "SIGSEGV" in last["message"] and "from outside" not in last["hint"]
    assert not (tmp_path / "out.glb").exists()
