"""Build a model and load its safetensors checkpoint with its weights allocated once.

The usual way — build the module (random initialisation allocates every weight), read the
checkpoint into a state dict (a second full copy), ``load_state_dict`` (copies into the first)
— needs about twice the model's bytes at its peak, plus the time of a random initialisation
that is thrown away.

:func:`load_module` instead:

1. builds the module inside ``with torch.device("meta"):`` — parameters get shapes and dtypes
   but no storage, and initialisation does no work (nor does it draw from any random
   generator);
2. reads the checkpoint with ``safetensors.torch.load_file(path, device=device)``, which on the
   CPU maps the file and hands out tensors backed by that mapping (pages come in from the page
   cache as they are first touched), and on CUDA / MPS copies each tensor straight to the device;
3. puts those tensors into the module with ``load_state_dict(state, strict=..., assign=True)``,
   which *assigns* the checkpoint's tensors as the parameters instead of copying into existing
   ones.

So each weight exists once. On the CPU the weights stay backed by the file's mapping: do not
overwrite or truncate the checkpoint while the model is loaded. Measured on this project's Linux
test machine (see ``tests/stageload/test_loading_memory.py``): the process high-water mark grows by
about 1.0× the checkpoint's bytes; the test allows 1.2×.

:func:`load_checkpoint` is the fallback for a module that is already built (normally, on its
device): it copies the checkpoint in one tensor at a time through ``safetensors.safe_open``, so
the peak is the module plus one tensor, not the module plus a whole state dict.

CUDA and MPS devices are passed straight to safetensors; they are not exercised on this
project's CPU-only test machine.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Union

import torch
from torch import nn

from .errors import CheckpointError, NotAModuleError
from .patching import patched

PathLike = Union[str, os.PathLike]

_REOPEN_BYTES = 64 << 20  # load_checkpoint: bytes read through one mapping before reopening


def load_module(build: Callable[[], nn.Module], checkpoint: PathLike, *,
                device: Union[str, torch.device] = "cpu", dtype: Optional[torch.dtype] = None,
                strict: bool = True, meta: bool = True) -> nn.Module:
    """Build ``build()`` without weights and give it the checkpoint's tensors on ``device``.

    Args:
        build: zero-argument callable returning the module (its constructor runs under
            ``torch.device("meta")`` when ``meta`` is True, else under ``torch.device(device)``).
        checkpoint: path of a ``.safetensors`` file whose names match ``module.state_dict()``.
        device: where the weights go (``"cpu"``, ``"cuda:0"``, ``"mps"``).
        dtype: convert floating-point tensors to this dtype while loading (one tensor at a
            time; the converted tensors are new memory and the file's pages read so far stay
            mapped until loading ends, so the peak is up to the checkpoint plus the converted
            bytes); None keeps the checkpoint's dtypes (the module takes them, as with
            ``assign=True``).
        strict: names must match exactly (as in ``load_state_dict``).
        meta: False builds the module normally on ``device`` and loads with
            :func:`load_checkpoint` (for modules whose construction cannot run on ``meta``,
            e.g. ones that compute buffers from data in ``__init__``): one copy of the weights,
            plus one tensor, plus the time of the random initialisation.

    Returns:
        the module, in the mode ``build()`` left it (call ``.eval()`` yourself).

    Raises:
        CheckpointError: the file is missing or not safetensors; names or shapes do not match;
            or a parameter or buffer is not in the checkpoint and would stay on ``meta``
            (a non-persistent buffer, or ``strict=False`` with missing names) — the message
            names them and suggests ``meta=False``.
        NotAModuleError: ``build()`` did not return an ``nn.Module``.
    """
    path = _checked_path(checkpoint)
    device = torch.device(device)
    if not meta:
        with torch.device(device):
            module = _build(build)
        load_checkpoint(module, path, strict=strict, dtype=dtype)
        return module
    with torch.device("meta"):
        module = _build(build)
    state = _read_file(path, device, dtype)
    try:
        result = module.load_state_dict(state, strict=strict, assign=True)
    except RuntimeError as exc:
        raise CheckpointError(f"{path.name} does not fit {type(module).__name__}: {exc}") from exc
    del state
    _check_nothing_on_meta(module, path, result.missing_keys)
    return module


def _read_file(path: Path, device: torch.device, dtype: Optional[torch.dtype]) -> dict:
    """``load_module``'s read: the whole safetensors file on ``device`` (name → tensor),
    floating tensors converted to ``dtype`` when given. Raises ``CheckpointError`` when the
    file cannot be read as safetensors."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        state = load_file(str(path), device=safetensors_device(device))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read {path} as safetensors: {exc}") from exc
    if dtype is not None:
        for name, tensor in state.items():
            if tensor.is_floating_point() and tensor.dtype != dtype:
                state[name] = tensor.to(dtype)
    return state


def _check_nothing_on_meta(module: nn.Module, path: Path, missing: list[str]) -> None:
    """Raise ``CheckpointError`` naming the parameters and buffers of ``module`` still on
    ``meta`` after loading ``path`` (``missing``: the names the checkpoint lacked)."""
    left = [name for name, tensor in _named_tensors(module) if tensor.is_meta]
    if left:
        shown = ", ".join(left[:8]) + (f" and {len(left) - 8} more" if len(left) > 8 else "")
        lacked = "; missing: " + ", ".join(missing[:8]) if missing else ""
        raise CheckpointError(
            f"{type(module).__name__} still has tensors on meta after loading {path.name}: "
            f"{shown} (not in the checkpoint{lacked}). If these are buffers computed in "
            "__init__, load with load_module(..., meta=False)")


def load_checkpoint(module: nn.Module, checkpoint: PathLike, *, strict: bool = True,
                    dtype: Optional[torch.dtype] = None) -> nn.Module:
    """Copy a safetensors checkpoint into an already built module, one tensor at a time.

    Each tensor is read with ``safe_open(...).get_tensor(name)``, copied into the existing
    parameter or buffer (``Tensor.copy_``, which converts dtype and device to the module's), and
    dropped before the next; the file is reopened every 64 MiB read, because pages read through
    safetensors' mapping stay in the process's memory until it is closed. So the peak is the
    module plus about 64 MiB (or the largest tensor, if bigger). Tied weights
    stay tied. ``dtype`` (if given) converts the module's floating-point tensors first
    (``module.to(dtype)``). Returns ``module``.

    Raises ``CheckpointError`` for a missing or unreadable file, a shape mismatch, or (with
    ``strict``) names missing from either side.
    """
    path = _checked_path(checkpoint)
    if dtype is not None:
        module.to(dtype)
    targets = module.state_dict(keep_vars=True)
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            names = list(handle.keys())
        if strict:
            missing = sorted(set(targets) - set(names))
            unexpected = sorted(set(names) - set(targets))
            if missing or unexpected:
                raise CheckpointError(
                    f"{path.name} does not fit {type(module).__name__}: missing {missing[:8]}, "
                    f"unexpected {unexpected[:8]}; pass strict=False to load what matches")
        names = [name for name in names if name in targets]
        done = 0
        while done < len(names):
            # safe_open maps the file; pages read through the mapping count in the process's
            # RSS until it is closed, so reopen it every _REOPEN_BYTES to bound that extra.
            with safe_open(str(path), framework="pt", device="cpu") as handle, torch.no_grad():
                read = 0
                while done < len(names) and read < _REOPEN_BYTES:
                    name = names[done]
                    target = targets[name]
                    tensor = handle.get_tensor(name)
                    if tensor.shape != target.shape:
                        raise CheckpointError(f"{path.name}: {name} has shape "
                                              f"{tuple(tensor.shape)}, "
                                              f"the module expects {tuple(target.shape)}")
                    target.copy_(tensor)
                    read += tensor.nbytes
                    done += 1
                    del tensor
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"cannot read {path} as safetensors: {exc}") from exc
    return module


def _checked_path(checkpoint: PathLike) -> Path:
    path = Path(checkpoint)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist (or is not a file)")
    return path


def _build(build: Callable[[], nn.Module]) -> nn.Module:
    module = build()
    if not isinstance(module, nn.Module):
        raise NotAModuleError(f"build() returned a {type(module).__name__}, not a torch.nn.Module")
    return module


def safetensors_device(device: torch.device) -> str:
    """The device string ``safetensors`` expects (``"cuda:0"`` for a bare ``"cuda"``)."""
    if device.type in ("cuda", "xpu") and device.index is None:
        return f"{device.type}:0"
    return str(device)


@contextlib.contextmanager
def init_on_meta(include_buffers: bool = True) -> Iterator[None]:
    """Build modules without weights (as ``accelerate.init_on_device(meta, include_buffers=)``).

    ``include_buffers=True``: the block runs under ``torch.device("meta")``: parameters,
    buffers and plain tensors a constructor makes are all ``meta``.

    ``include_buffers=False``: only *parameters* go to ``meta``, each replaced by a meta tensor
    of the same shape, dtype and ``requires_grad`` as it is registered (so initialisers that run
    afterwards do nothing and draw from no generator); buffers and plain tensor attributes
    computed in ``__init__`` are made for real on the current default device (combine with
    ``torch.device(device)``). For models whose checkpoints lack computed tables (RoPE
    frequencies kept as plain attributes). Patches ``nn.Module.register_parameter`` process-wide
    for the block and restores it exactly on exit (errors included).

    Example::

        with torch.device("mps"), init_on_meta(include_buffers=False):
            model = Model(**config)
    """
    if include_buffers:
        with torch.device("meta"):
            yield
        return
    original = nn.Module.register_parameter

    def register(self, name, param):
        original(self, name, param)
        current = self._parameters.get(name)
        if current is not None and not current.is_meta:
            try:
                self._parameters[name] = type(current)(current.detach().to("meta"),
                                                       requires_grad=current.requires_grad)
            except Exception:  # an exotic Parameter subclass: keep it real (assign replaces it)
                pass

    with patched(nn.Module, "register_parameter", register):
        yield


def read_state(checkpoint: PathLike, device: Union[str, torch.device] = "cpu", *,
               fresh_cpu_memory: bool = False, drop_behind: bool = True,
               cast: Optional[Mapping[str, torch.dtype]] = None) -> dict:
    """The tensors of a safetensors file on ``device`` (name -> tensor).

    CUDA/MPS: copied straight to the device (``load_file(device=)``: safetensors maps the file
    and copies each tensor from the mapping to the device, so the bytes go disk → page cache →
    device memory, one copy; on Apple unified memory the MPS buffer is the only private copy;
    not run here). CPU: by default tensors backed by the file's mapping (no copy).
    ``fresh_cpu_memory=True`` instead reads each tensor once, in large chunks, straight into its
    own freshly allocated (64-byte aligned) storage (``stageload.aligned_read.read_aligned``;
    ``drop_behind`` as there): the process holds the checkpoint's bytes once. Why: a tensor in
    the mapping sits at its file offset (4-byte aligned), and CPU matmul kernels take another
    path for unaligned operands; measured here, a stand-in flow model on mapped weights gave
    outputs 2.4e-7 away from the same weights in fresh memory (the port's own loader's), so a
    staged run was not bit-identical to an eager one on the CPU.

    ``cast`` (name → dtype, e.g. the dtypes of the module the state is for): each floating-point
    tensor named there is converted to that dtype as it is read, one tensor at a time, so the
    file's dtype and the module's never coexist for the whole checkpoint (the fresh CPU read:
    ``read_aligned``'s ``cast``; a device or the mapping: ``safe_open`` tensor by tensor, each
    converted on ``device`` before the next is read). Non-floating tensors and names not in
    ``cast`` come as stored.

    Raises ``CheckpointError`` for a missing or unreadable file, a header that fails
    validation, or an unknown dtype.
    """
    path = _checked_path(checkpoint)
    device = torch.device(device)
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from .aligned_read import read_aligned
    try:
        if device.type == "cpu" and fresh_cpu_memory:
            return read_aligned(path, drop_behind=drop_behind, cast=cast)
        if cast:
            return _read_cast(path, device, cast)
        return load_file(str(path), device=safetensors_device(device))
    except (SafetensorError, OSError, ValueError, KeyError) as exc:
        raise CheckpointError(f"cannot read {path} as safetensors: {exc}") from exc


def _read_cast(path: Path, device: torch.device, cast: Mapping[str, torch.dtype]) -> dict:
    """``read_state`` with ``cast`` on a device or from the mapping: tensor by tensor."""
    from safetensors import safe_open

    state = {}
    with safe_open(str(path), framework="pt", device=safetensors_device(device)) as f:
        for name in f.keys():
            tensor = f.get_tensor(name)
            target = cast.get(name)
            if (target is not None and target != tensor.dtype and tensor.is_floating_point()
                    and target.is_floating_point):
                tensor = tensor.to(target)
            state[name] = tensor
    return state


def _named_tensors(module: nn.Module):
    yield from module.named_parameters(remove_duplicate=False)
    yield from module.named_buffers(remove_duplicate=False)
