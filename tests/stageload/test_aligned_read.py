"""The aligned reader: the safetensors header validated before anything is allocated, each
tensor read once into its own aligned storage, the file's pages dropped behind (Linux)."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from stageload.aligned_read import CHUNK, read_aligned
from stageload.errors import CheckpointError


def _raw(path, header: dict, data: bytes, size=None) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if size is None else size) + text + data)


def test_every_dtype_round_trips_aligned(tmp_path):
    state = {"f32": torch.randn(3, 5), "bf16": torch.randn(7).to(torch.bfloat16),
             "f16": torch.randn(2, 2).half(), "i64": torch.arange(4), "u8": torch.arange(3).byte(),
             "empty": torch.zeros(0, 3), "scalar": torch.tensor(2.5),
             "mask": torch.tensor([True, False]), "f64": torch.randn(3).double(),
             "i8": torch.tensor([-1, 2], dtype=torch.int8),
             "c64": torch.polar(torch.ones(4, 3), torch.randn(4, 3))}  # a RoPE phase table
    path = tmp_path / "x.safetensors"
    save_file(state, str(path), metadata={"format": "pt"})
    out = read_aligned(path)
    assert set(out) == set(state)
    for name, tensor in state.items():
        assert out[name].dtype == tensor.dtype and out[name].shape == tensor.shape, name
        assert torch.equal(out[name], tensor), name
        assert out[name].numel() == 0 or out[name].data_ptr() % 64 == 0, name


def test_a_tensor_larger_than_one_chunk(tmp_path):
    big = torch.arange(CHUNK // 4 + 1000, dtype=torch.float32)
    path = tmp_path / "big.safetensors"
    save_file({"big": big}, str(path))
    assert torch.equal(read_aligned(path, drop_behind=False)["big"], big)


def _w(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"w": {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}}


@pytest.mark.parametrize("header, data, size, says", [
    (_w(), b"\0" * 8, 10**9, "header claims"),
    (_w(dtype="Q4"), b"\0" * 8, None, "dtype 'Q4'"),
    (_w(offsets=(0, 16)), b"\0" * 8, None, "past the file"),
    (_w(shape=(3,)), b"\0" * 8, None, "needs 12"),
    (_w(shape=(-2,)), b"\0" * 8, None, "shape"),
    (_w(offsets=(8, 0)), b"\0" * 8, None, "data_offsets"),
    ({"w": [1, 2]}, b"", None, "not an object"),
    ([1, 2], b"", None, "not a JSON object"),
])
def test_bad_headers_are_refused_with_what_is_wrong(tmp_path, header, data, size, says):
    path = tmp_path / "bad.safetensors"
    _raw(path, header, data, size)
    with pytest.raises(CheckpointError, match=says) as err:
        read_aligned(path)
    assert str(path) in str(err.value) and "again" in str(err.value)


def test_not_json_and_too_short(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", 4) + b"{{{{")
    with pytest.raises(CheckpointError, match="not JSON"):
        read_aligned(path)
    path.write_bytes(b"abc")
    with pytest.raises(CheckpointError, match="fewer than the 8-byte"):
        read_aligned(path)


def _resident(path):
    out = subprocess.run([shutil.which("fincore"), "--bytes", "--noheadings", "--raw", "--output",
                          "RES", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.strip())


@pytest.mark.skipif(not hasattr(os, "posix_fadvise") or shutil.which("fincore") is None,
                    reason="needs posix_fadvise and fincore (Linux)")
def test_drop_behind_leaves_the_file_out_of_the_page_cache(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"a": torch.randn(1 << 20), "b": torch.randn(1 << 19)}, str(path))
    size = path.stat().st_size
    with open(path, "rb") as f:
        os.fsync(f.fileno())  # written pages are dirty; only clean ones can be dropped
        f.read()  # all cached
    assert _resident(path) >= size - 4096
    read_aligned(path, drop_behind=False)
    assert _resident(path) >= size - 4096
    read_aligned(path)
    assert _resident(path) <= 2 * 4096  # at most the header's page and one partial page


def test_cast_converts_each_named_floating_tensor_as_a_whole_dict_conversion_would(tmp_path):
    state = {"w": torch.randn(64, 33), "b": torch.randn(33), "keep": torch.randn(5),
             "idx": torch.arange(6), "half": torch.randn(4).half()}
    path = tmp_path / "c.safetensors"
    save_file(state, str(path))
    cast = {"w": torch.bfloat16, "b": torch.float16, "idx": torch.float32,
            "half": torch.float32}
    out = read_aligned(path, cast=cast)
    assert torch.equal(out["w"], state["w"].to(torch.bfloat16))
    assert torch.equal(out["b"], state["b"].to(torch.float16))
    assert torch.equal(out["half"], state["half"].float())
    assert out["keep"].dtype == torch.float32 and torch.equal(out["keep"], state["keep"])
    assert out["idx"].dtype == torch.int64  # never a non-floating tensor


FREED_AT_ONCE = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
"""The probe's environment: glibc's malloc raises its mmap threshold each time a large block is
freed, so later tensors of that size come from the heap, whose freed memory it may keep — the
high-water mark then varies run to run (measured here: 83–131 MiB for the same read). A fixed
threshold returns every freed tensor to the kernel at once, so the peak is what is alive."""

_PEAK_SCRIPT = """
import os, sys, torch
from stageload.aligned_read import read_aligned
from stageload.meter import footprint, high_water_mark, reset_high_water_mark
path, mode = sys.argv[1], sys.argv[2]
cast = {f"t{i}": torch.float16 for i in range(8)}
reset_high_water_mark(os.getpid()); base = footprint(os.getpid(), tree=False)
if mode == "cast":
    state = read_aligned(path, cast=cast)
else:  # read everything, then convert: what a loader without cast does
    state = read_aligned(path)
    for k in list(state):
        state[k] = state[k].to(torch.float16)
print(high_water_mark(os.getpid()) - base)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"),
                    reason="needs Linux's resettable VmHWM")
def test_cast_holds_the_converted_bytes_and_one_tensor_not_both_copies(tmp_path):
    # 8 fp32 tensors of 16 MiB read as fp16: 64 MiB converted. Converting after the read holds
    # the 128 MiB read and the converted tensors (>= 128 MiB); converting each as it is read
    # holds the 64 MiB and one 16 MiB tensor.
    path = tmp_path / "fp32.safetensors"
    save_file({f"t{i}": torch.full((1 << 22,), float(i)) for i in range(8)}, str(path))
    mib = 1 << 20

    def peak(mode):
        out = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, str(path), mode],
                             capture_output=True, text=True, check=True, env=FREED_AT_ONCE)
        return int(out.stdout.strip().splitlines()[-1])

    after = peak("after")
    cast = peak("cast")
    assert after >= 128 * mib, after / mib
    assert cast <= 64 * mib + 16 * mib + 12 * mib, cast / mib  # + CHUNK-free slack
