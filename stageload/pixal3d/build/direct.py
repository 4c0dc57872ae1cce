"""Load one of the port's ``pixal3d.models`` checkpoints with its weights allocated once.

The port's own ``pixal3d.models.from_pretrained(path)`` builds the model with its random
initialisation (every weight allocated and filled), reads the safetensors file into a state
dict (a second copy) and copies it in with ``load_state_dict``: about 2x the model's bytes at
its peak, and the time of an initialisation that is thrown away (measured here: 1.8-2.1x and
0.30 GB/s against 1.24 GB/s for a cold read). :func:`load_port_model` reads the same files and
builds the same class instead as follows:

1. Files: ``{path}.json`` + ``{path}.safetensors`` when both exist, else the Hugging Face form
   ``ORG/REPO/sub/path`` through ``huggingface_hub.hf_hub_download`` — the same resolution the
   port's ``from_pretrained`` does (read in ``wowo0709/Pixal3D`` ``pixal3d/models/__init__.py``
   at 463378f7; the config is ``{"name": class name, "args": constructor kwargs}``).
2. Class: ``getattr(port.models, config["name"])`` — the port's own lazy namespace.
3. Build inside ``torch.device(device)`` with :func:`parameters_on_meta`: every parameter is
   moved to ``meta`` as it is registered, so weight initialisation (which runs after
   registration in ``nn.Linear`` and the models' ``initialize_weights``) does no work and draws
   nothing from the random generators. Buffers and plain tensor attributes computed in
   ``__init__`` are made for real on the target device. Why not a plain ``with
   torch.device("meta")``: the real TRELLIS.2-derived models keep RoPE frequency tables as plain
   tensor attributes (``SparseRotaryPositionEmbedder.freqs``, read in ``microsoft/TRELLIS.2``
   and its forks), which are in no checkpoint; under a meta device context they would be
   meta and could not be restored, so every RoPE model would have to fall back. This is the
   technique of ``accelerate.init_empty_weights(include_buffers=False)``: the project's one
   meta loader switch, ``stageload.loading.init_on_meta(include_buffers=False)``.
4. ``stageload.loading.read_state(model_file, device, fresh_cpu_memory=True)`` (on the CPU:
   each tensor copied into fresh aligned memory through a bounded mapping, so the matmul kernels see
   what the port's loader gives them; on CUDA/MPS: copied straight to the device), each floating
   tensor cast to the dtype the built module gave that name (what the port's ``copy_`` does; e.g. a
   model that converts its blocks to fp16 in ``__init__``) as soon as it is read, one tensor at a
   time (``read_state``'s ``cast``: the file's dtype and the module's never coexist for the
   whole checkpoint, so a checkpoint stored in fp32 for bf16 blocks takes the module's bytes plus
   one tensor, not 3x), then ``load_state_dict(state,
   strict=False, assign=True)`` — ``strict=False`` as the port's ``from_pretrained`` defaults to.
5. Before anything is read, the checkpoint is checked against the built module
   (:func:`check_checkpoint`, the safetensors header only): a parameter the model has that the
   file lacks, a tensor of another shape, or a floating tensor where the model's is not (or the
   reverse) is :class:`~stageload.pixal3d.errors.BadWeights` naming the file and the tensors.
   The port's own loader (``load_state_dict(strict=False)``) would keep that parameter's random
   initialisation and give a different model without a word, so this is
   never a reason to fall back.
6. Any buffer or plain tensor attribute still on ``meta`` (a buffer computed from the
   parameters' device and not saved in the checkpoint), or a constructor that cannot run this
   way: the half-built module is dropped and ``fallback()`` — the port's own
   ``from_pretrained`` on the device — builds this model instead; it is checked the same way.
   These are limits of the technique, not of the file: the port's loader computes the same
   tensors. The reason is returned (the adapter reports it as a ``warning`` event and adds it to
   the model's ``load`` event). A loaded model never keeps a meta tensor.

The first initialiser run on a meta tensor in a process imports ``torch._dynamo`` (a one-time
runtime cost, ~70 MB and 1.5-2.5 s); :func:`prepare_meta_runtime` pays it up front and the
adapter calls it in ``setup`` (see its docstring).
"""
from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from typing import Callable, Optional, TypeVar, Union

import torch
from torch import nn

from stageload.loading import init_on_meta, read_state
from stageload.pixal3d.errors import BadWeights

T = TypeVar("T")

#: ``LoadNote.method`` values.
METHOD_META = "meta_assign"
METHOD_PORT = "port_from_pretrained"


@dataclass
class RuntimeNote:
    """What :func:`prepare_meta_runtime` paid in this process: ``seconds`` (wall time),
    ``modules`` (modules newly imported), ``rss_bytes`` (resident memory it added, Linux RSS
    from ``/proc/self/statm``; None where that file does not exist, e.g. macOS). All 0 after
    the first call in a process."""
    seconds: float
    modules: int
    rss_bytes: Optional[int]


def _rss() -> Optional[int]:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def prepare_meta_runtime() -> RuntimeNote:
    """Pay, once per process, the runtime cost that the first initialiser run on a ``meta``
    tensor otherwise pays inside the first :func:`load_port_model`.

    Why: building a model under :func:`parameters_on_meta` runs its weight initialisers
    (``nn.init.normal_``/``uniform_``...) on meta tensors. torch has no C++ meta kernel for
    these; it dispatches them to the Python reference implementations in ``torch._refs``, which
    are wrapped by ``torch._compile._disable_dynamo``, and that wrapper does ``import
    torch._dynamo`` on its first call (read in torch 2.13 ``torch/_compile.py``). That import
    brings about 800 modules (dynamo, sympy, mpmath ...): measured here 68-77 MB of resident
    memory and 1.4-2.6 s on a 2-CPU machine (depending on load). It is interpreter state, not
    weights, and is never freed, so it belongs to the process's runtime baseline — paid where
    the runtime is set up, not inside whichever stage first loads a model (charged to a stage,
    it made every later stage's peak 0.06 GB over its limit at 1/8 scale and the first load 1.59 s).

    What it runs: the same trigger, minimally — ``normal_`` on a one-element meta tensor (which
    imports ``torch._dynamo`` through the same wrapper and caches the wrapped function). The
    benchmark's "alone" process calls this same function, so the runtime baseline it measures
    includes the same cost. Idempotent: later calls cost microseconds and return zeros.
    Returns a :class:`RuntimeNote`. Raises nothing beyond what torch raises.
    """
    import sys
    import time

    before_modules, before_rss, t0 = len(sys.modules), _rss(), time.perf_counter()
    torch.empty(1, device="meta").normal_()
    seconds = time.perf_counter() - t0
    after_rss = _rss()
    grown = None if before_rss is None or after_rss is None else max(0, after_rss - before_rss)
    return RuntimeNote(seconds, len(sys.modules) - before_modules, grown)


@dataclass
class LoadNote:
    """How one model was loaded. ``method``: ``"meta_assign"`` (parameters built on meta,
    safetensors assigned) or ``"port_from_pretrained"`` (the port's own loader);
    ``fallback``: why the port's loader was used (None when it was not a fallback);
    ``checkpoint``: the safetensors file read (None when unknown)."""
    method: str
    fallback: Optional[str] = None
    checkpoint: Optional[str] = None


def parameters_on_meta():
    """``loading.init_on_meta(include_buffers=False)``: parameters on ``meta`` as they are
    registered; buffers and plain tensors made for real (see there)."""
    return init_on_meta(include_buffers=False)


def checkpoint_files(path: str) -> tuple[str, str]:
    """``(config_file, model_file)`` for a port checkpoint path, resolved as the port's
    ``from_pretrained`` does (local pair, else the Hugging Face cache/download).
    Raises ``FileNotFoundError`` (or the hub's own error) when it cannot be found."""
    if os.path.exists(f"{path}.json") and os.path.exists(f"{path}.safetensors"):
        return f"{path}.json", f"{path}.safetensors"
    parts = str(path).split("/")
    if len(parts) < 3:
        raise FileNotFoundError(f"no {path}.json/.safetensors, and {path!r} is not "
                                f"ORG/REPO/sub/path")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        raise FileNotFoundError(f"no {path}.json/.safetensors and no huggingface_hub to look "
                                f"{path!r} up "
                                f"(the port's environment has it)") from exc
    repo_id, name = "/".join(parts[:2]), "/".join(parts[2:])
    return hf_hub_download(repo_id, f"{name}.json"), hf_hub_download(repo_id, f"{name}.safetensors")


def meta_tensors(module: nn.Module) -> list[str]:
    """Dotted names of every parameter, buffer and plain tensor attribute (also inside a list,
    tuple or dict attribute) of ``module`` and its submodules that is on ``meta``."""
    found = []
    for prefix, sub in module.named_modules(remove_duplicate=False):
        dot = f"{prefix}." if prefix else ""
        for name, t in list(sub._parameters.items()) + list(sub._buffers.items()):
            if t is not None and t.is_meta:
                found.append(dot + name)
        for name, value in vars(sub).items():
            if name in ("_parameters", "_buffers", "_modules"):
                continue
            items = value.items() if isinstance(value, dict) else (
                enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)])
            for key, t in items:
                if isinstance(t, torch.Tensor) and t.is_meta:
                    found.append(dot + name + (f"[{key!r}]" if key is not None else ""))
    return found


def load_port_model(models_ns, path: str, device: Union[str, torch.device],
                    fallback: Callable[[], nn.Module]) -> tuple[nn.Module, LoadNote]:
    """Load the checkpoint ``path`` of the port's ``pixal3d.models`` with its weights allocated
    once on ``device`` (see the module docstring), or through ``fallback()`` when that cannot
    give a complete module.

    Args:
        models_ns: the port's ``pixal3d.models`` module (classes resolved through it).
        path: checkpoint path as the port's pipeline passes it (``f"{model_path}/{ckpt}"``).
        device: target device.
        fallback: zero-argument callable returning the model built by the port's own
            ``from_pretrained`` on the device (used for this model only).

    Returns ``(module, note)``; the module has every tensor on ``device`` (call ``.eval()``).
    Raises what resolving the files raises (``FileNotFoundError``), ``BadWeights`` (the file does
    not fit the model: :func:`check_checkpoint`), ``ValueError`` for a config
    without ``name``/``args``, and what ``fallback()`` raises.
    """
    device = torch.device(device)
    config_file, model_file = checkpoint_files(path)
    with open(config_file) as f:
        config = json.load(f)
    if not isinstance(config, dict) or "name" not in config:
        raise ValueError(f"{config_file} is not a model config (needs "
                         f"{{\"name\": class, \"args\": {{...}}}})")
    cls = getattr(models_ns, config["name"])
    try:
        with torch.device(device), parameters_on_meta():
            module = cls(**(config.get("args") or {}))
    except Exception as exc:
        return _fallback(fallback, f"building {config['name']} with parameters on meta failed: "
                                   f"{type(exc).__name__}: {exc}", model_file, config["name"])
    check_checkpoint(module, model_file, config["name"])
    # fresh (aligned) CPU memory, as the port's own loader gives: see loading.read_state.
    # Each tensor is converted to the dtype the module holds it in as it is read (a bf16/fp16
    # torso from an fp32 file): converting after reading all would hold the file's bytes and
    # the converted ones at once.
    targets = module.state_dict(keep_vars=True)
    state = read_state(model_file, device, fresh_cpu_memory=True,
                       cast={name: t.dtype for name, t in targets.items()})
    module.load_state_dict(state, strict=False, assign=True)
    del state, targets
    left = meta_tensors(module)
    if left:
        del module
        shown = ", ".join(left[:6]) + (f" and {len(left) - 6} more" if len(left) > 6 else "")
        return _fallback(fallback,
                         f"{config['name']} has tensors that are not in "
                         f"{os.path.basename(model_file)} "
                                   f"and were computed from meta parameters: {shown}", model_file,
                         config["name"])
    return module, LoadNote(METHOD_META, None, model_file)


def _fallback(fallback: Callable[[], nn.Module], reason: str, model_file: Optional[str],
              class_name: str = ""):
    module = fallback()
    left = meta_tensors(module)
    if left:
        raise RuntimeError(f"the port's own loader left tensors on meta: {', '.join(left[:6])}")
    if model_file is not None:
        check_checkpoint(module, model_file, class_name or type(module).__name__)
    return module, LoadNote(METHOD_PORT, reason, model_file)


def _is_float(dtype: str) -> bool:
    # safetensors header dtypes: F64/F32/F16/BF16/F8_*, I*, U*, BOOL (safetensors format spec)
    return dtype.startswith("F") or dtype == "BF16"


def checkpoint_layout(model_file: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Tensor name → ``(shape, safetensors dtype)`` from the header of ``model_file`` (nothing
    else is read). Raises :class:`BadWeights` when the file is not a readable safetensors file."""
    from safetensors import safe_open

    try:
        with safe_open(model_file, framework="pt") as f:
            return {k: (tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype())
                    for k in f.keys()}
    except Exception as exc:  # the library raises its own SafetensorError or OSError
        raise BadWeights(f"{model_file} is not a readable safetensors file ({exc}).",
                         _BAD_WEIGHTS_HINT, (), model_file) from exc


_BAD_WEIGHTS_HINT = ("The weight file is incomplete or belongs to another model version: download "
                     "the Pixal3D weights again (the file named above), then run again.")


def check_checkpoint(module: nn.Module, model_file: str, class_name: str = "") -> None:
    """Check ``model_file`` against ``module`` (built on meta or for real): every parameter of
    the module must be in the file, and every tensor both have must agree in shape and in being
    floating point. Buffers missing from the file are left to the caller (the port keeps what
    ``__init__`` computed). Raises :class:`BadWeights` naming the file and the tensors."""
    layout = checkpoint_layout(model_file)
    params = {name for name, _ in module.named_parameters()}
    missing, wrong = [], []
    for name, tensor in module.state_dict(keep_vars=True).items():
        if name not in layout:
            if name in params:
                missing.append(name)
            continue
        shape, dtype = layout[name]
        if shape != tuple(tensor.shape) or _is_float(dtype) != tensor.is_floating_point():
            wrong.append(f"{name} ({dtype} {list(shape)} in the file, the model has "
                         f"{str(tensor.dtype).replace('torch.', '')} {list(tensor.shape)})")
    if not missing and not wrong:
        return
    what = class_name or type(module).__name__
    parts = []
    if missing:
        parts.append(f"lacks {len(missing)} tensor(s) {what} has: {_listed(missing)}")
    if wrong:
        parts.append(f"holds {len(wrong)} tensor(s) that do not fit {what}: {_listed(wrong)}")
    raise BadWeights(f"{model_file} " + "; ".join(parts) + ".", _BAD_WEIGHTS_HINT,
                     tuple(missing) + tuple(w.split(" ")[0] for w in wrong), model_file)


def _listed(names: list) -> str:
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def load_checked(from_pretrained: Callable[[str], nn.Module], path: str) -> nn.Module:
    """``from_pretrained(path)`` (the port's own loader), then :func:`check_checkpoint` of the
    module against the file it read (resolved as :func:`checkpoint_files` does): the port loads
    with ``strict=False`` and would keep a missing parameter's random initialisation. Raises
    what the loader raises and ``BadWeights``."""
    module = from_pretrained(path)
    if isinstance(module, nn.Module):
        check_checkpoint(module, checkpoint_files(path)[1])
    return module


def with_bare_fallback(load: Callable[[str], "T"], path: str, bare: Optional[str],
                       on_fallback: Optional[Callable[[str], None]] = None) -> "T":
    """``load(path)``; when it raises anything and ``bare`` is given, ``load(bare)`` — what the
    port's ``Pipeline.from_pretrained`` does for each model (``try: from_pretrained(
    f"{path}/{ckpt}") except Exception: from_pretrained(ckpt)``, read in ``TencentARC/Pixal3D``
    pipelines/base.py at 0660b18a). So every ``huggingface_hub`` miss falls back alike:
    ``EntryNotFoundError`` (a plain ``Exception`` in huggingface_hub 2.x),
    ``RepositoryNotFoundError`` (an ``OSError``), ``LocalEntryNotFoundError`` (offline, a
    ``FileNotFoundError``). ``BadWeights`` is not retried (a file that was found and does not
    fit). When ``bare`` was used, ``on_fallback(reason)`` is called (the adapter makes it a
    ``warning`` event: another checkpoint than the one asked for). Raises what ``load(bare)``
    raises (the first error chained), or the first error when there is no ``bare``."""
    try:
        return load(path)
    except BadWeights:
        raise  # the file was found and does not fit: no other checkpoint may stand in for it
    except Exception as first:
        if bare is None:
            raise
        try:
            result = load(bare)
        except Exception as second:
            raise second from first
        if on_fallback is not None:
            on_fallback(f"{path} could not be loaded ({type(first).__name__}: {first}); the "
                        f"port's fallback loaded {bare!r} instead")
        return result


def build_with_cpu_retry(build: Callable[[], nn.Module], device: Union[str, torch.device],
                         building: Callable[[torch.device], "contextlib.AbstractContextManager"]
                         ) -> tuple[nn.Module, Optional[str]]:
    """``build()`` inside ``building(device)``; when that raises and ``device`` is not the CPU
    (an accelerator without some operation a constructor uses), ``build()`` again inside
    ``building(cpu)`` and move the module to ``device``, as the reference implementation in the
    project's source documents does (the port builds on the CPU and moves, always). Returns
    ``(module, reason)``: ``reason`` is None, or why the CPU was used. Raises what the CPU build
    raises, or the first error on the CPU."""
    device = torch.device(device)
    try:
        with building(device):
            return build(), None
    except BadWeights:
        raise
    except Exception as exc:
        if device.type == "cpu":
            raise
        with building(torch.device("cpu")):
            module = build()
        return module.to(device), (f"building on {device} failed ({type(exc).__name__}: {exc}); "
                                   "built on the CPU, then moved")
