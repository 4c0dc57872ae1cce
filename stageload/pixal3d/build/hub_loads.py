"""The models the port builds through other libraries, loaded with their weights allocated once.

Three models of a run are not ``pixal3d.models`` checkpoints (``direct.py`` loads those):

- the background remover (BiRefNet/RMBG-2: ``transformers.AutoModelForImageSegmentation``) and
  the DINOv3 backbone (``transformers.DINOv3ViTModel``), both through ``transformers``'
  ``from_pretrained``. The port pins transformers 5.9.0 (Pixal3D-mac ``requirements-mac.txt``),
  whose ``from_pretrained`` builds the model on ``meta`` and reads each weight once onto the
  device of the surrounding ``torch.device`` context (its own low-memory loading, the only way
  since transformers pull request #36963; built directly on meta since #42941). The adapter
  builds them as the port does, inside ``torch.device(device)``: nothing to change.
- the camera estimator, MoGe-2 (``moge.model.v2.MoGeModel``, pinned at 07444410). Its
  ``from_pretrained`` (read in ``microsoft/MoGe`` ``moge/model/v2.py``) reads the whole
  ``model.pt`` (``torch.load``), then constructs the model (a random initialisation of every
  weight) and copies the state dict in: the checkpoint and the model at once, about 2x the
  model's bytes. MoGe has no low-memory option, so :func:`moge_loader` replaces that one
  classmethod for the duration of the port's own ``load_moge_model``: the same file, found the
  same way, read by :func:`read_checkpoint` (mapped from the file on the CPU, one tensor at a
  time onto another device), the model constructed with its parameters on ``meta``
  (``loading.init_on_meta(include_buffers=False)``, as ``direct.py`` does) and the checkpoint's
  tensors assigned (``load_state_dict(strict=False, assign=True)``, strict as MoGe's own). Each
  floating tensor keeps the dtype the constructor gave it (MoGe's ``copy_`` converts too).
  Anything left on ``meta`` (a name the checkpoint lacks), or a constructor that cannot run
  that way, falls back to MoGe's own ``from_pretrained`` for that load, and the reason is kept
  for the adapter's ``warning`` event.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch
from torch import nn

from stageload.loading import init_on_meta
from stageload.patching import patched
from stageload.pixal3d.build.direct import METHOD_META, METHOD_PORT, LoadNote, meta_tensors

#: Where MoGe-2's ``MoGeModel`` lives (the port's ``load_moge_model`` imports it from there).
MOGE_MODULE = "moge.model.v2"
#: MoGe's checkpoint file in its Hugging Face repository.
MOGE_FILE = "model.pt"


def assigned_state(module: nn.Module, state: dict) -> dict:
    """``state`` with each floating tensor converted to the dtype ``module`` gave that name
    (the conversion ``load_state_dict``'s copy makes; ``assign=True`` would otherwise take the
    checkpoint's dtype). Tensors already of that dtype are kept as they are (no copy)."""
    want = {name: t.dtype for name, t in module.state_dict(keep_vars=True).items()}
    out = {}
    for name, tensor in state.items():
        dtype = want.get(name)
        if dtype is not None and tensor.is_floating_point() and dtype.is_floating_point \
                and tensor.dtype != dtype:
            tensor = tensor.to(dtype)
        out[name] = tensor
    return out


def read_checkpoint(path: str, device: torch.device) -> dict:
    """A ``torch.save`` file's contents with its tensors on ``device``: on the CPU mapped from
    the file (``torch.load(mmap=True)``: no private copy; ``torch.save`` aligns each tensor to
    64 bytes in the file, as fresh allocations are), elsewhere read one tensor at a time onto
    the device (``map_location``). ``weights_only=True`` as MoGe's own. A file of the legacy
    (pre-zip) format, which cannot be mapped, is read whole."""
    if device.type != "cpu":
        return torch.load(path, map_location=device, weights_only=True)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:  # legacy format: torch.load says mmap needs the zip format
        return torch.load(path, map_location="cpu", weights_only=True)


def _moge_file(module, name_or_path, hf_kwargs: dict) -> str:
    """The checkpoint MoGe's ``from_pretrained`` would read: a path that exists as it is, else
    ``model.pt`` of the repository through the module's own ``hf_hub_download``."""
    if Path(name_or_path).exists():
        return str(name_or_path)
    return module.hf_hub_download(repo_id=name_or_path, repo_type="model", filename=MOGE_FILE,
                                  **hf_kwargs)


def _moge_assigned(cls, module, name_or_path, model_kwargs: Optional[dict], hf_kwargs: dict,
                   device: torch.device) -> tuple[Optional[nn.Module], Optional[str], str]:
    """``(model, None, file)`` built on meta with the checkpoint's tensors assigned on
    ``device``, or ``(None, reason, file)`` when that cannot give a complete model."""
    path = _moge_file(module, name_or_path, hf_kwargs)
    checkpoint = read_checkpoint(path, device)
    config = dict(checkpoint["model_config"])
    config.update(model_kwargs or {})
    try:
        with torch.device(device), init_on_meta(include_buffers=False):
            model = cls(**config)
    except Exception as exc:  # a constructor that cannot run with meta parameters
        return None, f"building {cls.__name__} with parameters on meta failed: {exc}", path
    state = assigned_state(model, checkpoint.pop("model"))
    del checkpoint
    model.load_state_dict(state, strict=False, assign=True)
    del state
    left = meta_tensors(model)
    if left:
        return None, (f"{Path(path).name} lacks {', '.join(left[:6])}"
                      f"{' …' if len(left) > 6 else ''}, so they would stay unloaded"), path
    return model, None, path


@contextlib.contextmanager
def moge_loader(device, notes: list) -> Iterator[None]:
    """Within the block, ``MoGeModel.from_pretrained`` builds with its weights allocated once on
    ``device`` (see the module docstring); each call appends a ``direct.LoadNote`` to ``notes``
    (``meta_assign``, or ``port_from_pretrained`` with the fallback's reason). Without an
    importable ``moge.model.v2`` nothing is patched (the port's own call then fails as it
    would). Restores the classmethod on exit."""
    try:
        from moge.model import v2 as module  # MOGE_MODULE: the port's dependency, if installed
        cls = module.MoGeModel
    except (ImportError, AttributeError):
        yield
        return
    original = cls.from_pretrained  # bound to the class: MoGe's own
    device = torch.device(device)

    def from_pretrained(klass, name_or_path, model_kwargs=None, **hf_kwargs):
        model, reason, path = _moge_assigned(klass, module, name_or_path, model_kwargs,
                                             hf_kwargs, device)
        if model is None:
            notes.append(LoadNote(METHOD_PORT, reason, path))
            return original(name_or_path, model_kwargs=model_kwargs, **hf_kwargs)
        notes.append(LoadNote(METHOD_META, None, path))
        return model

    with patched(cls, "from_pretrained", classmethod(from_pretrained)):
        yield


def load_camera_estimator(load_moge: Callable, device) -> tuple[nn.Module, LoadNote]:
    """The port's ``load_moge_model(device)`` (``load_moge``) run inside :func:`moge_loader`:
    ``(model, note)``; the note says how the weights were loaded (``port_from_pretrained``
    without a reason when MoGe was not importable here, i.e. the port's own path ran)."""
    notes: list[LoadNote] = []
    with moge_loader(device, notes):
        model = load_moge(torch.device(device))
    return model, (notes[-1] if notes else LoadNote(METHOD_PORT, None, None))
