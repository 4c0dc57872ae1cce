"""Stand-in of ``pixal3d.modules.attention.config``: the dense attention back end.

``BACKEND`` is read once from ``ATTN_BACKEND`` when it names a valid back end, as the real module
does. The real module's default is ``flash_attn``; on a Mac the port's ``generate_mps.py`` sets
``ATTN_BACKEND=sdpa`` before anything imports it (its notes: "dense image-cond attention stays
``sdpa``", INVESTIGATION_FACTS.md Bug D), so that is this stand-in's default. ``flash_attn``
imports the ``flash_attn`` package — on a Mac, mtlflashattn's import shim; here the stand-in's
plain-PyTorch one.
"""
import os
from typing import *

BACKEND = 'sdpa'
DEBUG = False

VALID_BACKENDS = ['xformers', 'flash_attn', 'flash_attn_3', 'flash_attn_4', 'sdpa', 'naive']


def __from_env():
    global BACKEND, DEBUG
    env = os.environ.get('ATTN_BACKEND')
    if env is not None and env in VALID_BACKENDS:
        BACKEND = env
    debug = os.environ.get('ATTN_DEBUG')
    if debug is not None:
        DEBUG = debug == '1'


__from_env()


def set_backend(backend: Literal['xformers', 'flash_attn', 'flash_attn_3', 'flash_attn_4',
                                 'sdpa', 'naive']):
    global BACKEND
    BACKEND = backend


def set_debug(debug: bool):
    global DEBUG
    DEBUG = debug
