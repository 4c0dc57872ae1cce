"""Read a safetensors file into fresh, aligned CPU tensors at the disk's speed.

Why not ``safetensors`` itself: on the CPU it offers tensors backed by the file's mapping
(each at its file offset, 4-byte aligned, which sends CPU matmul kernels down another path:
see ``stageload.loading.read_state``) or, through a copy of a mapped tensor, the bytes twice
while the copy is made. This module reads each tensor once, straight from the file into its
final storage (``torch.empty`` of the tensor's bytes: 64-byte aligned by torch's CPU
allocator), in large chunks (``CHUNK``, ``readinto`` on a memoryview of that storage, so no
intermediate buffer), in file order.

The format (huggingface/safetensors, README "Format"): 8 bytes, an unsigned little-endian
64-bit integer N, the header's size; N bytes, a UTF-8 JSON object mapping each tensor name to
``{"dtype", "shape", "data_offsets": [BEGIN, END]}`` (offsets relative to the byte after the
header) plus an optional ``"__metadata__"`` object of strings; then the byte buffer. Only what
reading needs is parsed, and it is validated first (:func:`parse_header`): the header fits in
the file and is at most ``HEADER_LIMIT`` (the reference implementation's limit), each entry
has a known dtype, a shape of non-negative integers and offsets inside the file whose length is
``dtype size × prod(shape)``. A file that fails any check raises ``CheckpointError`` naming the
file, the tensor and what is wrong, before any tensor memory is allocated.

Drop-behind (Linux): after each chunk is copied into the tensor, the chunk's page-cache pages
are dropped (``posix_fadvise(POSIX_FADV_DONTNEED)`` on that range). The process now holds
those bytes itself, so the cached copy would only double the pages the read needs (1 × in the
cache + 1 × in the tensor); dropping them keeps the demand at the bytes + one chunk, and the
next chunk's fresh pages are the ones just freed. Measured on this project's Linux machine (a
virtual machine, where a freshly allocated page costs a host fault): reading a 1 GiB file into
fresh memory took 3.1–4.0 s without and 1.5–2.2 s with drop-behind, against 0.8–4.4 s for a
plain cold read on the same (busy) machine; the benchmark (``bench/pixal3d/loadspeed.py``)
measures it in one run. The cost: a model read again later finds its file out of the cache
unless something reads it ahead (``stageload.prefetch`` does, for the plan's next stage).
``drop_behind=False`` keeps the cache. On macOS there is no ``posix_fadvise``: nothing is
dropped (the unified buffer cache keeps the pages; not run here).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import torch

from .errors import CheckpointError

#: Bytes per read() call: large enough for sequential throughput, small enough that the pages
#: dropped behind are reused by the next chunk.
CHUNK = 64 << 20
#: The largest header accepted (bytes): the reference implementation's limit.
HEADER_LIMIT = 10**8  # 100 MB: MAX_HEADER_SIZE in safetensors/src/tensor.rs

#: safetensors dtype codes → (torch dtype name, bytes per element). Names torch lacks are
#: skipped at import (an older torch), and such a file is refused with the dtype named.
_DTYPE_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
                "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
                "U16": "uint16", "U32": "uint32", "U64": "uint64", "BOOL": "bool",
                "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
                # a RoPE model's computed phase table is a persistent complex64 buffer
                # (TRELLIS.2's dense structure flow: ``rope_phases``)
                "C64": "complex64"}
DTYPES = {code: getattr(torch, name) for code, name in _DTYPE_NAMES.items() if hasattr(torch, name)}


@dataclass(frozen=True)
class Entry:
    """One tensor of a safetensors file: ``start``/``end`` are absolute file offsets (bytes)."""
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def _bad(path: Path, what: str) -> CheckpointError:
    return CheckpointError(f"{path} is not a valid safetensors file: {what}. Download or write "
                           f"the checkpoint again")


def parse_header(f, path: Path, file_size: int) -> list[Entry]:
    """The tensors of the safetensors file open as ``f`` (binary, at offset 0), in file order.

    Raises ``CheckpointError`` for a header that does not fit the file or the format (see the
    module docstring)."""
    if file_size < 8:
        raise _bad(path, f"it has {file_size} bytes, fewer than the 8-byte header size")
    size = int.from_bytes(f.read(8), "little")
    if size > HEADER_LIMIT or 8 + size > file_size:
        raise _bad(path, f"its header claims {size} bytes; the file has {file_size} "
                         f"(limit {HEADER_LIMIT})")
    try:
        header = json.loads(f.read(size))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(path, f"its header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise _bad(path, "its header is not a JSON object")
    base = 8 + size
    entries = [_entry(path, name, info, base, file_size)
               for name, info in header.items() if name != "__metadata__"]
    return sorted(entries, key=lambda e: e.start)


def _entry(path: Path, name: str, info, base: int, file_size: int) -> Entry:
    if not isinstance(info, dict):
        raise _bad(path, f"tensor {name!r} is described by a {type(info).__name__}, not an object")
    dtype = DTYPES.get(info.get("dtype"))
    if dtype is None:
        raise _bad(path, f"tensor {name!r} has dtype {info.get('dtype')!r}; "
                         f"known: {', '.join(DTYPES)}")
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise _bad(path, f"tensor {name!r} has shape {shape!r}, not a list of integers >= 0")
    if not (isinstance(offsets, list) and len(offsets) == 2
            and all(type(o) is int and o >= 0 for o in offsets) and offsets[0] <= offsets[1]):
        raise _bad(path, f"tensor {name!r} has data_offsets {offsets!r}, not [begin, end]")
    start, end = base + offsets[0], base + offsets[1]
    if end > file_size:
        raise _bad(path, f"tensor {name!r} ends at byte {end}, past the file's end ({file_size})")
    expected = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if end - start != expected:
        raise _bad(path, f"tensor {name!r} has {end - start} bytes; {info['dtype']} × {shape} "
                         f"needs {expected}")
    return Entry(name, dtype, tuple(shape), start, end)


def read_aligned(checkpoint: os.PathLike | str, *, drop_behind: bool = True,
                 cast: Optional[Mapping[str, torch.dtype]] = None) -> dict:
    """Every tensor of a safetensors file, each in fresh CPU memory (name → tensor).

    Each tensor's bytes are read once from the file into its own ``torch.empty`` storage
    (64-byte aligned), ``CHUNK`` bytes per ``readinto``; with ``drop_behind`` (Linux), each
    chunk's page-cache pages are dropped once copied (module docstring). Peak: the tensors'
    bytes plus one chunk of page cache.

    ``cast`` (name → dtype): a floating-point tensor named there whose file dtype differs is
    converted (``Tensor.to``) as soon as it is read, and its file-dtype copy freed before the
    next tensor is read, so the peak is the converted tensors' bytes plus the largest single
    tensor in its file dtype, not the whole file in its dtype plus the converted copies (a
    checkpoint stored in fp32 for a module whose blocks are bf16/fp16 would otherwise hold
    both: up to 3x the module's bytes). The values are those of converting the whole dict
    afterwards: the same ``to`` on the same tensor. Names not in ``cast``, non-floating
    tensors and floating ones mapped to a non-floating dtype are returned as stored.

    Raises ``CheckpointError`` for a header that fails validation or a file that ends early,
    ``OSError`` for a file that cannot be opened or read.
    """
    path = Path(checkpoint)
    drop = drop_behind and hasattr(os, "posix_fadvise")
    cast = cast or {}
    state = {}
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        entries = parse_header(f, path, os.fstat(fd).st_size)
        for entry in entries:
            raw = torch.empty(entry.nbytes, dtype=torch.uint8)
            if entry.nbytes:
                f.seek(entry.start)
                _read_into(f, memoryview(raw.numpy()), path, entry, drop)
            tensor = raw.view(entry.dtype).reshape(entry.shape)
            del raw
            target = cast.get(entry.name)
            if (target is not None and target != tensor.dtype and tensor.is_floating_point()
                    and target.is_floating_point):
                tensor = tensor.to(target)
            state[entry.name] = tensor
    return state


def _read_into(f, view: memoryview, path: Path, entry: Entry, drop: bool) -> None:
    fd, done, total = f.fileno(), 0, len(view)
    while done < total:
        n = f.readinto(view[done:done + CHUNK])
        if not n:
            raise _bad(path, f"the file ends inside tensor {entry.name!r} "
                             f"({done} of {total} bytes)")
        if drop:
            os.posix_fadvise(fd, entry.start + done, n, os.POSIX_FADV_DONTNEED)
        done += n
