"""``on_call``: run code before / after a method of ONE existing object, and take it off again.

Used to mark stage boundaries on a pipeline object without changing its code: the pipeline's own
``run()`` executes unchanged and calls, say, ``self.decode_latent(...)``, which now first calls
``models.enter("decode")``.

How: the hooked method is stored as an *instance* attribute (a wrapper around the bound method
found before), which Python finds before the class's method. Other instances and the class are
untouched. ``remove()`` deletes the instance attribute again (or puts back an instance attribute
that was there before), so lookup falls back to the class. Written by hand: it is a dozen lines
and the libraries that do it (e.g. ``wrapt``) patch the class, not one instance.

Copies and pickles: a hook belongs to the one object it was installed on. ``copy.deepcopy`` and
``pickle`` of a hooked object give an object *without* the hook, which behaves like an unhooked
instance: its method is its own class's method (or the instance attribute that was there before
the hook), running on the copy's own state — never the original's. The hook's ``before`` and
``after`` (which usually drive one ``StagedModels``) are not carried over; hook the copy with
its own ``on_call`` if it needs one. A shallow ``copy.copy`` shares instance attributes by
definition, so it shares the hook too (its method runs the original's): use ``deepcopy``.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional

from .errors import HookError

_MISSING = object()


class CallHook:
    """Handle returned by :func:`on_call`. ``remove()`` uninstalls; also a context manager.

    Attributes: ``obj``, ``method`` (name), ``calls`` (int: completed and failed calls seen),
    ``active`` (bool).
    """

    def __init__(self, obj: Any, method: str, previous: Any, wrapper: Callable):
        self.obj = obj
        self.method = method
        self._previous = previous  # the instance attribute before us, or _MISSING
        self._wrapper = wrapper
        self.calls = 0
        self.active = True

    def remove(self) -> None:
        """Uninstall. Safe to call twice. If another hook was installed on top of this one
        later, this one turns into a pass-through and that other hook keeps working."""
        if not self.active:
            return
        self.active = False
        current = vars(self.obj).get(self.method, _MISSING)
        if current is self._wrapper:
            previous = self._previous
            while getattr(previous, "_stageload_hook",
                          None) is not None and not previous._stageload_hook.active:
                previous = previous._stageload_hook._previous  # skip hooks removed while under us
            if previous is _MISSING:
                delattr_plain(self.obj, self.method)
            else:
                setattr_plain(self.obj, self.method, previous)

    def __enter__(self) -> "CallHook":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def __repr__(self) -> str:
        state = "active" if self.active else "removed"
        return f"<CallHook {type(self.obj).__name__}.{self.method} {state}, {self.calls} calls>"


def setattr_plain(obj: Any, name: str, value: Any) -> None:
    # object.__setattr__ skips nn.Module.__setattr__ (which would treat modules specially).
    object.__setattr__(obj, name, value)


def delattr_plain(obj: Any, name: str) -> None:
    object.__delattr__(obj, name)


def on_call(obj: Any, method: str, before: Optional[Callable[..., Any]] = None,
            after: Optional[Callable[..., Any]] = None) -> CallHook:
    """Call ``before(*args, **kwargs)`` before and ``after(result, *args, **kwargs)`` after
    ``obj.method(*args, **kwargs)``, for this one instance only.

    ``args``/``kwargs`` are the call's own arguments (without ``self``). The return values of
    ``before`` and ``after`` are ignored; the method's result is returned unchanged. If the
    method raises, ``after`` is not called and the exception propagates. If ``before`` raises,
    the method is not called. Hooks may be stacked on one method (the last installed runs
    outermost), and a hooked method may call other hooked methods (each hook runs at its own
    call, inner ones nested in outer ones).

    Returns a :class:`CallHook`; ``handle.remove()`` restores the original lookup.

    Raises ``HookError`` when ``obj`` has no callable attribute ``method`` or has no instance
    ``__dict__`` (``__slots__`` classes).
    """
    if before is not None and not callable(before):
        raise HookError(f"before= must be callable, got {type(before).__name__}")
    if after is not None and not callable(after):
        raise HookError(f"after= must be callable, got {type(after).__name__}")
    original = _hookable(obj, method)
    return _install(obj, method, original, _HookedMethod(original, before, after))


def around_call(obj: Any, method: str, around: Callable[..., Any]) -> CallHook:
    """Run ``around(call, *args, **kwargs)`` instead of ``obj.method(*args, **kwargs)``, for
    this one instance only; ``call`` is the method found before (bound to ``obj``), which
    ``around`` may call any number of times (e.g. once per chunk of its input), and what
    ``around`` returns is the call's result.

    Installed, stacked and removed exactly like :func:`on_call` (same :class:`CallHook`
    handle, same rules for copies); a hook stacked on top of it sees ``around``'s result.
    Used by :mod:`stageload.working_memory` to run a forward in chunks.

    Raises ``HookError`` for the same reasons as :func:`on_call`, or when ``around`` is not
    callable.
    """
    if not callable(around):
        raise HookError(f"around= must be callable, got {type(around).__name__}")
    original = _hookable(obj, method)
    return _install(obj, method, original, _HookedMethod(original, None, None, around))


def _hookable(obj: Any, method: str) -> Callable:
    """The callable ``obj.method`` that a hook will wrap; ``HookError`` when there is none."""
    if isinstance(obj, type):
        raise HookError(f"on_call hooks one instance; {obj.__name__} is a class. Pass the object "
                        f"whose {method!r} should be hooked")
    original = getattr(obj, method, _MISSING)
    if original is _MISSING:
        raise HookError(f"{type(obj).__name__} object has no attribute {method!r} to hook")
    if not callable(original):
        raise HookError(f"{type(obj).__name__}.{method} is a {type(original).__name__}, not a "
                        f"method")
    if not hasattr(obj, "__dict__"):
        raise HookError(f"cannot hook {type(obj).__name__}.{method}: the object has no instance "
                        f"__dict__ (__slots__), so a per-instance hook cannot be installed")
    return original


def _install(obj: Any, method: str, original: Callable, wrapper: "_HookedMethod") -> CallHook:
    previous = vars(obj).get(method, _MISSING)
    handle = CallHook(obj, method, previous, wrapper)
    wrapper._stageload_hook = handle
    setattr_plain(obj, method, wrapper)
    return handle


class _HookedMethod:
    """The instance attribute :func:`on_call` installs: calls ``before``, the method found
    before (``original``, bound to the hooked object) — or ``around(original, ...)`` for
    :func:`around_call` — then ``after``. A class rather than a closure so that copies and
    pickles can drop it (see the module docstring)."""

    def __init__(self, original: Callable, before: Optional[Callable], after: Optional[Callable],
                 around: Optional[Callable] = None):
        functools.update_wrapper(self, original)  # name, docstring and signature of the method
        self._original = original
        self._before = before
        self._after = after
        self._around = around
        self._stageload_hook: CallHook

    def __call__(self, *args, **kwargs):
        handle = self._stageload_hook
        if not handle.active:  # removed while another hook sits on top of us
            return self._original(*args, **kwargs)
        handle.calls += 1
        if self._before is not None:
            self._before(*args, **kwargs)
        if self._around is not None:
            result = self._around(self._original, *args, **kwargs)
        else:
            result = self._original(*args, **kwargs)
        if self._after is not None:
            self._after(result, *args, **kwargs)
        return result

    def __reduce__(self):
        # Used by pickle and copy.deepcopy, which copy the hooked object's instance dict: in the
        # copy this attribute becomes what was there without the hook, for the copy's object.
        handle = self._stageload_hook
        previous = handle._previous
        had_previous = previous is not _MISSING
        return _unhooked, (handle.obj, handle.method, had_previous,
                           previous if had_previous else None)


def _unhooked(obj: Any, method: str, had_previous: bool, previous: Any) -> Any:
    """What a copy (or unpickled object) ``obj`` gets for a hooked ``method``: the instance
    attribute that was there before the hook (itself unhooked the same way if it was a hook),
    else the class's method bound to ``obj``."""
    if had_previous:
        return previous
    # The class attribute through the descriptor protocol, as attribute lookup does: a plain
    # function binds to obj, a staticmethod or classmethod stays what it is.
    return inspect.getattr_static(type(obj), method).__get__(obj, type(obj))
