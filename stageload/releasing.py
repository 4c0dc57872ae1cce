"""Release a module's weights for real, and empty the allocator caches.

``release(module)`` replaces every parameter and buffer of the module (and of all its
submodules) by a tensor of the same shape and dtype on PyTorch's ``meta`` device, which has no
storage. The tensors are swapped *inside* the module, so the storage is freed even while other
code still holds a reference to the module object (a pipeline attribute, a closure, a list);
only a reference to an individual parameter tensor would keep that tensor alive — and so
does an autograd graph: an output computed with gradients enabled keeps the weights it used
until that output is dropped, so run inference under ``torch.inference_mode()`` or
``torch.no_grad()`` (the ``release`` event counts the bytes either way).

A released module — and every submodule in it, so that a reference such as ``sub = model[1]``
kept elsewhere is covered too — is marked so that anything that would use, move, cast or save
its (now absent) weights raises :class:`ReleasedModuleError` naming the model and the stage
that released it, instead of PyTorch's meta-tensor error from deep inside a kernel, a silent
no-op, or a pickling error about a local function. On each of them these are replaced by
instance attributes that raise (:data:`REFUSED`):

- calling: ``forward`` (covers ``module(x)``, ``module.forward(x)`` and methods such as
  ``decoder.upsample(x)`` that call a submodule);
- moving and casting: ``to``, ``cpu``, ``cuda``, ``xpu``, ``ipu``, ``mtia``, ``half``,
  ``float``, ``double``, ``bfloat16``, ``type``, ``to_empty``, ``share_memory`` and the
  ``_apply`` they all go through (PyTorch's ``nn.Module`` has no ``mps()``: ``to("mps")``
  is covered by ``to``);
- saving and copying: ``state_dict`` (it would give ``meta`` tensors that save as nothing),
  ``load_state_dict`` (weights put back into a released module would stay unusable: build a new
  one), and ``__reduce_ex__`` / ``__reduce__``, through which
  ``torch.save``, ``pickle`` and ``copy.deepcopy`` work — so ``torch.save(model)`` of a model
  that is or contains a released module raises too.

Reading a parameter directly (``module.weight``, ``module.parameters()``) still gives a
``meta`` tensor: a plain attribute read cannot be intercepted without a tensor subclass. A
shallow ``copy.copy`` of a released module shares these attributes and so is refused the same
way.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
import time
from typing import Optional

import torch
from torch import nn

from .errors import ReleasedModuleError
from .events import EventSink, emit

_MARK = "_stageload_released"  # instance attribute: (model name, stage) of a released module


def module_bytes(module: nn.Module) -> int:
    """Bytes held by the module's parameters and buffers, each storage counted once.

    Tensors on ``meta`` count 0. Tied weights and views of one storage are counted once
    (keyed by device and storage address). Plain tensor attributes that are neither parameters
    nor buffers are not counted.
    """
    seen: set[tuple[str, int]] = set()
    total = 0
    for tensor in _tensors(module):
        if tensor.is_meta:
            continue
        storage = tensor.untyped_storage()
        key = (str(tensor.device), storage.data_ptr())
        if key in seen:
            continue
        seen.add(key)
        total += storage.nbytes()
    return total


def _tensors(module: nn.Module):
    for sub in module.modules():
        for value in sub._parameters.values():
            if value is not None:
                yield value
        for value in sub._buffers.values():
            if value is not None:
                yield value


def is_released(module: nn.Module) -> bool:
    """True when :func:`release` has released this module (and nothing has revived it)."""
    return getattr(module, _MARK, None) is not None


def released_by(module: nn.Module) -> Optional[tuple[Optional[str], Optional[str]]]:
    """``(model, stage)`` given to :func:`release` for this module, or None if not released."""
    return getattr(module, _MARK, None)


def release(module: nn.Module, *, name: Optional[str] = None, stage: Optional[str] = None,
            empty_cache: bool = True, events: Optional[EventSink] = None,
            reason: Optional[str] = None) -> int:
    """Move every parameter and buffer of ``module`` to ``meta`` and return the bytes it held.

    Args:
        module: the model to release (its submodules are released with it, including a
            submodule it shares with another model).
        name, stage: the model's name and the releasing stage, used in the
            :class:`ReleasedModuleError` raised when the module is used afterwards and in the
            ``release`` event.
        empty_cache: empty the CUDA / MPS allocator caches (and trim the C heap) afterwards;
            ``StagedModels.enter`` passes False and empties once after all its releases.
        events: optional sink; gets one ``release`` event (``model``, ``stage``, ``bytes``,
            ``seconds``, and ``reason`` when given).
        reason: why the model goes now, and what that costs (a release inside a stage, e.g.
            "used by nothing after its sampler"); None for the plan's stage-boundary releases.

    Returns:
        bytes the module's parameters and buffers held before (unique storages, see
        :func:`module_bytes`); they are returned to the allocator unless something else holds
        a reference to an individual tensor. Releasing an already released module returns 0.

    Raises:
        TypeError: ``module`` is not an ``nn.Module``.

    A released module stays marked (its hooks raise) even if weights are put back into it by
    hand: build a new module instead, which is what ``StagedModels`` loaders do.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"release() needs a torch.nn.Module, got {type(module).__name__}")
    start = time.perf_counter()
    freed = module_bytes(module)
    _swap_to_meta(module)
    _mark_released(module, name, stage)
    if empty_cache:
        empty_allocator_cache()
    extra = {} if reason is None else {"reason": reason}
    emit(events, "release", model=name, stage=stage, bytes=freed,
         seconds=time.perf_counter() - start, **extra)
    return freed


def _swap_to_meta(module: nn.Module) -> None:
    # In a function of its own so that no local variable keeps an old tensor alive afterwards.
    replaced: dict[int, torch.Tensor] = {}  # keeps tied weights tied on meta
    for sub in module.modules():
        for key, value in list(sub._parameters.items()):
            if value is not None and not value.is_meta:
                new = replaced.get(id(value))
                if new is None:
                    new = nn.Parameter(torch.empty_like(value, device="meta"),
                                       requires_grad=value.requires_grad)
                    replaced[id(value)] = new
                sub._parameters[key] = new
        for key, value in list(sub._buffers.items()):
            if value is not None and not value.is_meta:
                new = replaced.get(id(value))
                if new is None:
                    new = torch.empty_like(value, device="meta")
                    replaced[id(value)] = new
                sub._buffers[key] = new


#: Methods a released module (and each of its submodules) refuses; see the module docstring.
REFUSED = ("forward", "_apply", "to", "cpu", "cuda", "xpu", "ipu", "mtia", "half", "float",
           "double", "bfloat16", "type", "to_empty", "share_memory", "state_dict",
           "load_state_dict", "__reduce_ex__", "__reduce__")


class _Refusal:
    """Instance attribute standing in for method ``method`` of a released module: raises
    :class:`ReleasedModuleError` with the (model, stage) the module is marked with when called."""

    def __init__(self, module: nn.Module, method: str):
        self.module = module
        self.method = method

    def __call__(self, *args, **kwargs):
        model, stage = getattr(self.module, _MARK, None) or (None, None)
        if self.method == "forward":
            detail = ""
        elif self.method.startswith("__"):
            detail = "(It cannot be saved, pickled or copied: save the model before releasing it.)"
        else:
            detail = f"(.{self.method}() refused: there are no weights to move, cast or save.)"
        raise ReleasedModuleError(model, stage, detail)


def _mark_released(module: nn.Module, name: Optional[str], stage: Optional[str]) -> None:
    # Every submodule gets the mark and its own refusals: a reference to a submodule kept
    # elsewhere is refused too. Releasing again (another stage, or a shared submodule released
    # with its other owner) only updates the names the refusals report.
    for sub in module.modules():
        fresh = not is_released(sub)
        object.__setattr__(sub, _MARK, (name, stage))
        if fresh:
            for method in REFUSED:
                if method == "forward" or hasattr(nn.Module, method):  # torch-version proof
                    object.__setattr__(sub, method, _Refusal(sub, method))


def empty_allocator_cache() -> list[str]:
    """Give memory the allocators keep cached back to the system; return what was emptied.

    - CUDA: ``torch.cuda.empty_cache()`` when CUDA is available and initialised.
    - MPS: ``torch.mps.empty_cache()`` when ``torch.backends.mps.is_available()``.
    - Linux glibc: ``malloc_trim(0)`` (ctypes; no library wraps it), which returns freed heap
      pages that glibc would otherwise keep for reuse.

    The CUDA and MPS branches are not run on this project's Linux CPU test machine (no GPU, no
    Mac); the names checked are the documented torch APIs. Returns e.g. ``["malloc_trim"]``.
    """
    done: list[str] = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
        done.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        torch.mps.empty_cache()
        done.append("mps")
    if _malloc_trim():
        done.append("malloc_trim")
    return done


_LIBC = None


def _malloc_trim() -> bool:
    global _LIBC
    if not sys.platform.startswith("linux"):
        return False
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _ = _LIBC.malloc_trim  # musl has none: AttributeError
        except (OSError, AttributeError):
            _LIBC = False
    if not _LIBC:
        return False
    _LIBC.malloc_trim(0)
    return True
