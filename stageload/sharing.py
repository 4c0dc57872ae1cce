"""``share``: inside a block, identical calls of a constructor or factory return one instance.

Pixal3D builds four DINOv3 feature extractors, and each loads the same backbone. Wrapping the
backbone's factory with ``share`` makes the second, third and fourth call return the first
call's object, so the backbone is in memory once::

    with share(transformers.AutoModel, "from_pretrained"):
        build_extractors()           # four extractors, one backbone object

Arguments are compared by value where they are hashable (``"dinov3", 1024, ("a", 1)``; a value
of another type is another key, so ``1`` and ``1.0`` differ) and by identity otherwise (a
dict, a list, a tensor): the same list object matches, an equal but different list does not.
On exit the attribute is put back exactly as it was (a class's ``staticmethod`` or
``classmethod`` object included), and the shared instances are dropped from the cache (the
objects themselves live on where they were stored).

Patch the attribute where the caller looks it up: code that did ``from m import build``
before the block keeps its own reference and is not affected; patch that module's ``build``.
"""
from __future__ import annotations

import inspect
from contextlib import contextmanager
from typing import Any, Hashable, Iterator

from .errors import ShareError
from .patching import MISSING as _MISSING
from .patching import own_value, patched


class Shared:
    """What :func:`share` yields: ``calls`` (int), ``hits`` (calls answered from the cache),
    ``instances`` (list of the distinct objects built, in order)."""

    def __init__(self, owner: Any, attr: str):
        self.owner = owner
        self.attr = attr
        self.calls = 0
        self.hits = 0
        self._cache: dict[Hashable, Any] = {}
        self._keep: list[Any] = []  # unhashable arguments, kept alive so their ids stay unique

    @property
    def instances(self) -> list[Any]:
        return list(self._cache.values())

    def key(self, args: tuple, kwargs: dict) -> Hashable:
        """The cache key of one call (see the module docstring for the comparison rules)."""
        return (tuple(self._part(a) for a in args),
                tuple(sorted((name, self._part(value)) for name, value in kwargs.items())))

    def _part(self, value: Any) -> Hashable:
        try:
            hash(value)
        except TypeError:
            self._keep.append(value)
            return ("id", id(value))
        return ("value", type(value), value)


@contextmanager
def share(owner: Any, attr: str) -> Iterator[Shared]:
    """While the block runs, ``owner.attr(*args, **kwargs)`` with identical arguments returns
    the instance the first such call returned.

    Args:
        owner: a module or class holding the constructor / factory (``torch.nn``,
            ``transformers.AutoModel``, a pipeline module).
        attr: the attribute's name (a class, function, staticmethod or classmethod).

    Yields a :class:`Shared` with counters. Raises ``ShareError`` when ``owner`` has no
    callable ``attr``. Calls that raise are not cached. Blocks on the same attribute nest.
    """
    current = getattr(owner, attr, _MISSING)
    if current is _MISSING:
        raise ShareError(f"{_name(owner)} has no attribute {attr!r} to share")
    if not callable(current):
        raise ShareError(f"{_name(owner)}.{attr} is a {type(current).__name__}, not a constructor "
                         f"or factory")
    raw = own_value(owner, attr)
    state = Shared(owner, attr)

    def shared(*args, **kwargs):
        state.calls += 1
        key = state.key(args, kwargs)
        if key in state._cache:
            state.hits += 1
            return state._cache[key]
        made = current(*args, **kwargs)
        state._cache[key] = made
        return made

    # On a class, a plain function would bind the caller's instance: keep instance methods
    # binding (self then becomes part of the key), make everything else a staticmethod.
    if isinstance(owner, type) and not inspect.isfunction(raw):
        installed: Any = staticmethod(shared)
    else:
        installed = shared
        if isinstance(owner, type):
            current = raw  # the unbound function; self arrives as the first argument
    try:
        with patched(owner, attr, installed):  # restores the raw attribute, or deletes it
            yield state
    finally:
        state._cache.clear()
        state._keep.clear()


def _name(owner: Any) -> str:
    return getattr(owner, "__name__", type(owner).__name__)
