"""``patched``: set an attribute for a block, then put back exactly what was there.

One helper for every temporary replacement stageload makes (``share``, the Pixal3D adapter's
deferred construction, ``loading.init_on_meta``). "Exactly" means what the owner's own
``__dict__`` held: a class's ``staticmethod``/``classmethod`` object goes back as that object
(not the function ``getattr`` returns), and an attribute the owner only inherited (or that a
module's ``__getattr__`` answered) is deleted again, so lookup falls back as before.

Example::

    with patched(torch.hub, "load", recording_load):
        extractor._load_naf()
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

_MISSING = object()


def own_value(owner: Any, attr: str) -> Any:
    """What ``owner.__dict__`` holds for ``attr`` (the raw descriptor), or ``MISSING``."""
    return vars(owner).get(attr, _MISSING) if hasattr(owner, "__dict__") else _MISSING


MISSING = _MISSING


@contextlib.contextmanager
def patched(owner: Any, attr: str, value: Any) -> Iterator[None]:
    """Within the block ``owner.attr`` is ``value``; on exit (errors included) the owner's own
    attribute is restored as it was, or deleted when it had none. Raises what ``setattr``
    raises (e.g. ``AttributeError`` on an object without a ``__dict__`` slot for it)."""
    raw = own_value(owner, attr)
    setattr(owner, attr, value)
    try:
        yield
    finally:
        if raw is _MISSING:
            delattr(owner, attr)
        else:
            setattr(owner, attr, raw)
