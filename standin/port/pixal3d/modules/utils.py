"""Stand-in of ``pixal3d.modules.utils``: the fp16 conversion of a model's torso
(``convert_module_to_f16``: the parameters of convolutions and linear layers only — norms stay
fp32), its any-dtype form ``convert_module_to(module, dtype)`` (the flow models' ``convert_to``
applies it to their blocks: the RMS norms' ``gamma`` and a block's ``modulation`` stay fp32),
``zero_module``, ``manual_cast`` (cast unless autocast is on; a sparse tensor casts its feats)
and ``str_to_dtype`` (a config's ``dtype`` name: ``float16``/``fp16``/``f16``,
``bfloat16``/``bf16``, ``float32``/``fp32``/``f32``; KeyError otherwise), as the real module."""
import torch
import torch.nn as nn

from . import sparse as sp

MIX_PRECISION_MODULES = (
    nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d,
    nn.Linear, sp.SparseConv3d, sp.SparseInverseConv3d, sp.SparseLinear,
)


def convert_module_to_f16(module):
    """Make ``module``'s parameters float16 if it is a convolution or a linear layer."""
    if isinstance(module, MIX_PRECISION_MODULES):
        for p in module.parameters():
            p.data = p.data.half()


def convert_module_to(module, dtype):
    """Make ``module``'s parameters ``dtype`` if it is a convolution or a linear layer."""
    if isinstance(module, MIX_PRECISION_MODULES):
        for p in module.parameters():
            p.data = p.data.to(dtype)


def convert_module_to_f32(module):
    """Undo :func:`convert_module_to_f16`."""
    if isinstance(module, MIX_PRECISION_MODULES):
        for p in module.parameters():
            p.data = p.data.float()


def zero_module(module):
    """Zero ``module``'s parameters in place; returns it."""
    for p in module.parameters():
        p.detach().zero_()
    return module


def manual_cast(tensor, dtype):
    """``tensor`` as ``dtype`` unless autocast is on (then autocast decides)."""
    if not torch.is_autocast_enabled():
        return tensor.type(dtype)
    return tensor


_DTYPES = {
    'f16': torch.float16, 'fp16': torch.float16, 'float16': torch.float16,
    'bf16': torch.bfloat16, 'bfloat16': torch.bfloat16,
    'f32': torch.float32, 'fp32': torch.float32, 'float32': torch.float32,
}


def str_to_dtype(dtype_str: str) -> torch.dtype:
    """The torch dtype a model config names (its ``dtype`` argument)."""
    return _DTYPES[dtype_str]
