"""``StagedModels``: a lazy mapping name → ``nn.Module`` that keeps only the current stage's models.

A *plan* names the models (``loaders``: name → zero-argument function that builds the model on
its target device) and the stages in order (``stages``: stage → names it needs). Indexing loads a
model the first time it is asked for; ``enter(stage)`` releases every loaded model that the
stage does not list and that is not pinned, empties the allocator caches, and only then marks
the stage *ready* (a stage's memory window begins at ``ready``, not at ``stage``: releasing can
take seconds, and that memory belongs to the previous stage).

One object serves many inputs: after the last stage, ``enter(first_stage)`` starts the next run
(re-armed, not rebuilt); models released in between are loaded again on access (``reload``).

Prefetch: given ``files`` (name → the files its loader reads), once a stage is ready and has
loaded the models it lists (one released inside the stage by :meth:`StagedModels.release`
counts: the stage is done with it) or reports ``progress`` (it computes), a
background reader (``stageload.prefetch.Prefetcher``) asks the OS to read ahead into its file
cache the files of the models the *next* stage lists that are neither loaded now nor listed
by the current stage (which loads those itself); it is
stopped at once by the next ``enter``, by ``close`` and by ``cancel_prefetch``. It holds no
tensors and emits one ``prefetch`` event per model; a ``load``/``reload`` event says
``prefetched: true`` when that model's files were read ahead completely before it.

Not thread-safe: use one ``StagedModels`` from one thread at a time (the prefetch thread only
reads files and emits events, under a lock shared with this object's own events).
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Optional, Union

from torch import nn

from .errors import (
    LoaderError,
    NotAModuleError,
    PlanError,
    ReleasedModuleError,
    UnknownModelError,
    UnknownStageError,
)
from .events import EventSink, emit
from .prefetch import Prefetcher
from .releasing import empty_allocator_cache, is_released, module_bytes, release
from .rng import preserved_rng

Loader = Callable[[], nn.Module]
Plan = Union[Mapping[str, Iterable[str]], Iterable[tuple[str, Iterable[str]]]]
Files = Mapping[str, Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]]]


class StagedModels(MutableMapping):
    """Mutable mapping name → ``nn.Module`` that loads on first access and releases by stage.

    Args:
        loaders: name → zero-argument callable returning the built ``nn.Module`` (on the device
            it should run on). ``None`` declares a name whose module the caller assigns later
            with ``models[name] = module``.
        stages: stage → names it needs, in run order (a dict, or (stage, names) pairs). A single
            string is taken as one name.
        pinned: names never released by ``enter`` (only by ``close``, ``del`` or ``unpin`` then
            ``enter``).
        events: sink for ``load``, ``reload``, ``release``, ``stage``, ``ready`` and
            ``progress`` events (see ``stageload.events``); None emits nothing.
        preserve_rng: save every random generator before each load and restore it after
            (``stageload.rng``), so building a model mid-run leaves the pipeline's noise
            unchanged. False only for control experiments.
        files: name → the file (or files) its loader reads, for the prefetch (module
            docstring); models not named are not prefetched. None: no prefetch.
        prefetch: True (default) reads the next stage's files ahead when ``files`` is given;
            False never does; a ``stageload.prefetch.Prefetcher`` is used as given (its own
            floor, method and events; its events are redirected to this object's sink).
        prefetch_floor: bytes of available memory the prefetch leaves (the guard's kill
            threshold); None: 10 % of total memory.

    Mapping behaviour: ``in``, ``len()``, ``keys()`` and iterating names never load;
    ``models[name]`` loads if needed; ``values()`` and ``items()`` return only the models loaded
    now (lists, a snapshot). ``models[name] = module`` adds or replaces a model as loaded (the
    previous object under that name is dropped, not released); ``del models[name]`` releases
    the model and forgets the name; ``clear()`` does that for all names.

    Attributes:
        outside_stage: list of ``(model, stage)`` for every load or reload that happened while
            a stage was current that neither lists nor pins the model (also flagged
            ``outside_stage: true`` in the event). Loads before the first ``enter`` are not
            outside any stage.
        events, preserve_rng: as given; may be changed between calls.

    Raises (at construction): ``UnknownModelError`` when a stage or ``pinned`` names a model not
    in ``loaders``; ``PlanError`` when a loader is neither callable nor None (or is a built
    module) or a stage appears twice; ``UnknownModelError`` or ``PlanError`` for ``files``
    naming an unknown model or giving something that is not a path.
    """

    def __init__(self, loaders: Mapping[str, Optional[Loader]], stages: Plan,
                 pinned: Iterable[str] = (),
                 events: Optional[EventSink] = None, *, preserve_rng: bool = True,
                 files: Optional[Files] = None, prefetch: Union[bool, Prefetcher] = True,
                 prefetch_floor: Optional[int] = None):
        self._loaders: dict[str, Optional[Loader]] = {}
        for name, loader in dict(loaders).items():
            if isinstance(loader, nn.Module):
                raise PlanError(f"the loader of model {name!r} is a built module; give a "
                                f"zero-argument "
                                f"function that builds it (e.g. lambda: MyModel()), or declare the "
                                f"name "
                                f"with None and assign the module with models[{name!r}] = module")
            if loader is not None and not callable(loader):
                raise PlanError(f"the loader of model {name!r} is a {type(loader).__name__}, not a "
                                f"zero-argument function returning an nn.Module (or None)")
            self._loaders[name] = loader
        pairs = list(stages.items()) if isinstance(stages,
                                                   Mapping) else [tuple(pair) for pair in stages]
        self._plan: dict[str, tuple[str, ...]] = {}
        for stage, names in pairs:
            if stage in self._plan:
                raise PlanError(f"stage {stage!r} appears twice in the plan; give each stage once")
            names = (names,) if isinstance(names, str) else tuple(names)
            unknown = [name for name in names if name not in self._loaders]
            if unknown:
                raise UnknownModelError(
                    f"stage {stage!r} names model(s) {', '.join(map(repr, unknown))} that have no "
                    f"loader; "
                    f"known models: {', '.join(map(repr, self._loaders)) or 'none'}. Add a loader "
                    f"(or None to assign it later) or fix the stage's list")
            self._plan[stage] = names
        self._order: list[str] = list(self._plan)
        pinned = (pinned,) if isinstance(pinned, str) else tuple(pinned)
        unknown = [name for name in pinned if name not in self._loaders]
        if unknown:
            raise UnknownModelError(f"pinned names unknown model(s) "
                                    f"{', '.join(map(repr, unknown))}; "
                                    f"known models: "
                                    f"{', '.join(map(repr, self._loaders)) or 'none'}")
        self._pinned: set[str] = set(pinned)
        self._loaded: dict[str, nn.Module] = {}
        self._released: dict[str, Optional[str]] = {}  # name → stage that released it
        self._stage: Optional[str] = None
        self._index: Optional[int] = None
        self.outside_stage: list[tuple[str, Optional[str]]] = []
        self.events = events
        self.preserve_rng = preserve_rng
        self._emit_lock = threading.Lock()
        self._files = _checked_files(files, self._loaders)
        self._prefetcher: Optional[Prefetcher] = None
        self._prefetch_pending = False
        self._done_in_stage: set[str] = set()  # released by release() since the stage began
        if isinstance(prefetch, Prefetcher):
            self._prefetcher = prefetch
        elif prefetch and self._files:
            self._prefetcher = Prefetcher(floor=prefetch_floor)
        if self._prefetcher is not None:
            self._prefetcher.events = self._sink

    def _sink(self, event: dict) -> None:
        """Every event of this object (and of its prefetch thread) goes through here, one at a
        time, to ``self.events``."""
        with self._emit_lock:
            if self.events is not None:
                self.events(event)

    # ----------------------------------------------------------------- mapping protocol
    def _present(self, name: str) -> bool:
        return name in self._loaders and (self._loaders[name] is not None or name in self._loaded
                                          or name in self._released)

    def __contains__(self, name: object) -> bool:
        """True for a name that can be indexed (has a loader, or was assigned). Never loads."""
        return isinstance(name, str) and self._present(name)

    def __iter__(self) -> Iterator[str]:
        """Names in plan order (as in ``loaders``, then assigned ones). Never loads."""
        return iter([name for name in self._loaders if self._present(name)])

    def __len__(self) -> int:
        """Number of names (loaded or not). Never loads."""
        return sum(1 for name in self._loaders if self._present(name))

    def __getitem__(self, name: str) -> nn.Module:
        """The model, loading it (``load``) or loading it again after a release (``reload``).

        Raises:
            UnknownModelError: no such name (also a ``KeyError``), or a name declared with a
                None loader that has not been assigned yet.
            ReleasedModuleError: the model was released and has no loader to load it again.
            LoaderError: the loader raised (original exception chained); nothing changed.
            NotAModuleError: the loader returned something that is not an ``nn.Module``.
        """
        module = self._loaded.get(name)
        if module is not None:
            if not is_released(module):
                return module
            # released behind our back (release(models[name]) by the caller): count it as released
            del self._loaded[name]
            self._released[name] = (getattr(module, "_stageload_released", None) or (None, None))[1]
        if not isinstance(name, str) or name not in self._loaders:
            raise UnknownModelError(f"no model named {name!r}; known models: "
                                    f"{', '.join(map(repr, self._loaders)) or 'none'}")
        loader = self._loaders[name]
        if loader is None:
            if name in self._released:
                raise ReleasedModuleError(name, self._released[name],
                                          "It was assigned, not loaded, so it cannot be loaded "
                                          "again: "
                                          "assign it again with models[name] = module.")
            raise UnknownModelError(f"model {name!r} has no loader and has not been assigned yet; "
                                    f"assign it with models[{name!r}] = module")
        return self._load(name, loader)

    def _load(self, name: str, loader: Loader) -> nn.Module:
        kind = "reload" if name in self._released else "load"
        outside = self._is_outside(name)
        prefetched = self._prefetcher is not None and self._prefetcher.take(name)
        start = time.perf_counter()
        with preserved_rng(self.preserve_rng):  # restored on error too: state unchanged
            try:
                module = loader()
            except Exception as exc:
                where = f" in stage {self._stage!r}" if self._stage is not None else ""
                raise LoaderError(name,
                                  f"loading model {name!r}{where} failed: {type(exc).__name__}: "
                                        f"{exc}. Nothing was loaded; fix the loader or its "
                                        f"checkpoint "
                                        f"and index the model again") from exc
        seconds = time.perf_counter() - start
        if not isinstance(module, nn.Module):
            raise NotAModuleError(f"the loader of model {name!r} returned a "
                                  f"{type(module).__name__}, "
                                  f"not a torch.nn.Module; it must build and return the model")
        if is_released(module):
            raise LoaderError(name,
                              f"the loader of model {name!r} returned a module that was released "
                                    f"earlier (its weights are gone); a loader must build or load "
                                    f"the "
                                    f"model anew each time it is called")
        self._loaded[name] = module
        self._released.pop(name, None)
        if outside:
            self.outside_stage.append((name, self._stage))
        emit(self._sink, kind, model=name, stage=self._stage, bytes=module_bytes(module),
             seconds=seconds, outside_stage=outside, prefetched=prefetched)
        if self._prefetch_pending and self._stage_loaded():
            self._start_prefetch()  # the stage's own loads are done
        return module

    def _is_outside(self, name: str) -> bool:
        return (self._stage is not None and name not in self._plan[self._stage]
                and name not in self._pinned)

    def __setitem__(self, name: str, module: nn.Module) -> None:
        """Add or replace ``name`` with an already built module, counted as loaded (no event).

        The stage plan is not changed: a name that the current plan does not list is released
        at the next ``enter`` like any other (unless pinned). Raises ``NotAModuleError`` for a
        non-module, ``ReleasedModuleError`` for a module that was released, ``TypeError`` for a
        name that is not a str.
        """
        if not isinstance(name, str):
            raise TypeError(f"model names are str, got {type(name).__name__}")
        if not isinstance(module, nn.Module):
            raise NotAModuleError(f"models[{name!r}] must be a torch.nn.Module, got "
                                  f"{type(module).__name__}")
        if is_released(module):
            raise ReleasedModuleError(name, None,
                                      "A released module cannot be assigned; assign a built one.")
        self._loaders.setdefault(name, None)
        self._loaded[name] = module
        self._released.pop(name, None)

    def __delitem__(self, name: str) -> None:
        """Release the model if loaded (``release`` event) and forget the name.

        Stages that list the name keep listing it; indexing it afterwards raises
        ``UnknownModelError`` until it is assigned again.
        """
        if not isinstance(name, str) or not self._present(name):
            raise UnknownModelError(f"no model named {name!r} to delete")
        if name in self._loaded:
            self._release(name, self._stage)
            empty_allocator_cache()
        del self._loaders[name]
        self._released.pop(name, None)
        self._pinned.discard(name)

    def clear(self) -> None:
        """Release and forget every model, without loading any."""
        for name in list(self):
            del self[name]

    def values(self) -> list[nn.Module]:  # type: ignore[override]
        """The models loaded now, in load order. Never loads."""
        return list(self._loaded.values())

    def items(self) -> list[tuple[str, nn.Module]]:  # type: ignore[override]
        """``(name, model)`` for the models loaded now, in load order. Never loads."""
        return list(self._loaded.items())

    def loaded(self) -> list[str]:
        """Names of the models loaded now, in load order."""
        return list(self._loaded)

    # ----------------------------------------------------------------- stages
    @property
    def stage(self) -> Optional[str]:
        """The current stage, or None before the first ``enter`` and after ``close``."""
        return self._stage

    @property
    def stages(self) -> dict[str, tuple[str, ...]]:
        """The plan: stage → names it lists, in run order (a copy)."""
        return dict(self._plan)

    @property
    def pinned(self) -> frozenset[str]:
        """Names ``enter`` never releases."""
        return frozenset(self._pinned)

    def enter(self, stage: str, *, preload: bool = False) -> int:
        """Begin ``stage``: release what it does not need, empty the caches, mark it ready.

        Emits ``stage`` (``index``, ``count``), one ``release`` per released model, then
        ``ready`` with ``seconds`` (from the start of ``enter`` to ready) and
        ``released_bytes``. With ``preload=True`` the stage's models are loaded after
        ``ready`` (a prefetch policy) instead of on first access. Entering the first stage
        again starts the next run. First of all it stops a prefetch in progress; the next
        stage's prefetch starts once this stage has loaded what it lists (at once when it lists
        nothing to load) or calls :meth:`progress`.

        Returns the bytes released. Raises ``UnknownStageError`` (state unchanged) for a stage
        not in the plan.
        """
        if stage not in self._plan:
            raise UnknownStageError(f"stage {stage!r} is not in the plan; stages: "
                                    f"{', '.join(map(repr, self._order)) or 'none'}")
        self.cancel_prefetch("stage change")
        self._prefetch_pending = False
        start = time.perf_counter()
        self._stage = stage
        self._index = self._order.index(stage)
        self._done_in_stage = set()
        emit(self._sink, "stage", stage=stage, index=self._index, count=len(self._order))
        keep = set(self._plan[stage]) | self._pinned
        released = 0
        for name in [name for name in self._loaded if name not in keep]:
            released += self._release(name, stage)
        empty_allocator_cache()
        emit(self._sink, "ready", stage=stage, seconds=time.perf_counter() - start,
             released_bytes=released)
        self._prefetch_pending = self._prefetcher is not None
        if self._stage_loaded():
            self._start_prefetch()
        if preload:
            for name in self._plan[stage]:
                if self._present(name):
                    self[name]
        return released

    # ----------------------------------------------------------------- prefetch
    @property
    def files(self) -> dict[str, tuple[Path, ...]]:
        """name → the files its loader reads, as given (a copy)."""
        return dict(self._files)

    @property
    def prefetcher(self) -> Optional[Prefetcher]:
        """The prefetch reader, or None when there is no prefetch."""
        return self._prefetcher

    def cancel_prefetch(self, reason: str = "cancel") -> None:
        """Stop the prefetch in progress now (its event says ``stopped``/``skipped`` with
        ``reason``) and wait for its thread to end. No-op when none runs."""
        if self._prefetcher is not None:
            self._prefetcher.stop(reason)

    def _stage_loaded(self) -> bool:
        """Every model the current stage lists (that has a loader) is loaded, or was and has
        been released inside the stage (:meth:`release`: the stage is done with it)."""
        return all(name in self._loaded or name in self._done_in_stage
                   or self._loaders.get(name) is None for name in self._plan.get(self._stage, ()))

    def _start_prefetch(self) -> None:
        """Read ahead the files of the next stage's models not loaded now — once per stage,
        after its ``ready`` and its own loads (so it does not compete with them)."""
        if not self._prefetch_pending:
            return
        self._prefetch_pending = False
        if self._prefetcher is None or self._index is None or self._index + 1 >= len(self._order):
            return
        after = self._order[self._index + 1]
        # not those loaded now, nor those this stage lists (it loads them itself, and they
        # stay loaded into the next stage)
        here = set(self._plan[self._stage])
        wanted = [name for name in self._plan[after] if name not in self._loaded
                  and name not in here and self._loaders.get(name) is not None]
        for name in wanted:
            if name not in self._files:
                emit(self._sink, "prefetch", model=name, stage=self._stage, for_stage=after,
                     bytes=0, file_bytes=0, seconds=0.0, state="skipped",
                     reason="no files known for this model", method=self._prefetcher.method)
        self._prefetcher.start(self._stage, after,
                               [(name,
                                 self._files[name]) for name in wanted if name in self._files])

    def progress(self, fraction: float) -> None:
        """Emit a ``progress`` event (``fraction`` 0..1, clamped) for the current stage."""
        self._start_prefetch()  # the stage computes: its own loads are done
        emit(self._sink, "progress", stage=self._stage,
             fraction=min(1.0, max(0.0, float(fraction))))

    def release(self, name: str, reason: Optional[str] = None) -> int:
        """Release one model now, keeping its name (it loads again on access); return the bytes.

        For a model a stage needs only briefly (e.g. a background remover, released when its
        method returns). The ``release`` event carries the current stage and ``reason`` when
        given (why now, and what it costs). Returns 0 when the model is not loaded; raises
        ``UnknownModelError`` for an unknown name.
        """
        if name not in self._loaders:
            raise UnknownModelError(f"cannot release unknown model {name!r}")
        if name not in self._loaded:
            return 0
        freed = self._release(name, self._stage, reason)
        self._done_in_stage.add(name)
        empty_allocator_cache()
        return freed

    def _release(self, name: str, stage: Optional[str], reason: Optional[str] = None) -> int:
        module = self._loaded.pop(name)
        freed = release(module, name=name, stage=stage, empty_cache=False, events=self._sink,
                        reason=reason)
        self._released[name] = stage
        return freed

    def pin(self, name: str) -> None:
        """Keep ``name`` loaded across stages. Raises ``UnknownModelError`` for an unknown name."""
        if name not in self._loaders:
            raise UnknownModelError(f"cannot pin unknown model {name!r}")
        self._pinned.add(name)

    def unpin(self, name: str) -> None:
        """Stop pinning ``name``; the next ``enter`` releases it if that stage does not list it."""
        if name not in self._loaders:
            raise UnknownModelError(f"cannot unpin unknown model {name!r}")
        self._pinned.discard(name)

    def close(self) -> int:
        """Release every loaded model, pinned ones too; return the bytes released.

        The release events carry the current stage; afterwards there is no current stage. The
        object stays usable: indexing reloads, ``enter`` starts a new run.
        """
        self.cancel_prefetch("close")
        self._prefetch_pending = False
        released = 0
        for name in list(self._loaded):
            released += self._release(name, self._stage)
        empty_allocator_cache()
        self._stage = None
        self._index = None
        return released

    def __enter__(self) -> "StagedModels":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"StagedModels(stage={self._stage!r}, loaded={list(self._loaded)!r}, "
                f"released={list(self._released)!r}, pinned={sorted(self._pinned)!r})")


def _checked_files(files: Optional[Files],
                   loaders: Mapping[str, object]) -> dict[str, tuple[Path, ...]]:
    """``files`` as name → tuple of Paths. Raises ``UnknownModelError`` for a name without a
    loader, ``PlanError`` for a value that is not a path or a list of paths."""
    out: dict[str, tuple[Path, ...]] = {}
    for name, value in dict(files or {}).items():
        if name not in loaders:
            raise UnknownModelError(f"files names model {name!r}, which has no loader; known "
                                    f"models: {', '.join(map(repr, loaders)) or 'none'}")
        items = [value] if isinstance(value, (str, os.PathLike)) else value
        try:
            paths = tuple(Path(item) for item in items)
        except TypeError:
            raise PlanError(f"files[{name!r}] must be a path or a list of paths, got "
                            f"{type(value).__name__}") from None
        out[name] = paths
    return out
