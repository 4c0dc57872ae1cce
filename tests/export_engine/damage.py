"""Damage one member of an ``.npz`` in place, the way a bad copy or a disk error does: bytes of
its stored data overwritten, the zip's directory and CRC left as they were (so only reading the
member to its end notices). For the tests of damaged assets."""
from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import numpy as np


def damage_member(path: Path, key: str, count: int = 100) -> Path:
    """Overwrite the last ``count`` bytes (at most the array data's size: the ``.npy`` header
    before it stays readable) of member ``key`` of the uncompressed ``.npz`` at ``path`` with
    ``0xA5``. Returns ``path``. The local file header's layout: PKWARE APPNOTE 4.3.7 (30 fixed
    bytes, the name and extra field lengths at offsets 26 and 28)."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(key + ".npy")
        assert info.compress_type == zipfile.ZIP_STORED, "np.savez writes stored members"
        with archive.open(info) as f:
            version = np.lib.format.read_magic(f)
            (np.lib.format.read_array_header_1_0 if version == (1, 0)
             else np.lib.format.read_array_header_2_0)(f)
            header = f.tell()  # where the array data starts inside the member
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
        start = info.header_offset + 30 + name_len + extra_len
        count = min(count, info.file_size - header)
        f.seek(start + info.file_size - count)
        f.write(b"\xa5" * count)
    return path
