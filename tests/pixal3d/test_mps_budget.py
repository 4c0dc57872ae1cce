"""The MPS allocator's hard limit comes from the memory the run starts with: what is available
then, less the guard's default kill floor (10 % of total). The arithmetic and its unknowns, and
that a lean run hands the figure to the part that sets it. Setting it needs MPS (a Mac): not
run here; tests/pixal3d/test_lean_model.py covers the limit's call with a stand-in refusal."""
from __future__ import annotations

import pytest

from stageload.meter import system_memory
from stageload.pixal3d.lean import working
from stageload.pixal3d.lean.mps_limit import KILL_FREE_SHARE, budget_from_memory
from tests.pixal3d.runs import new_run

GiB = 1024**3


def test_the_budget_is_available_memory_above_the_kill_floor():
    assert budget_from_memory(48 * GiB, 30 * GiB) == int(30 * GiB - KILL_FREE_SHARE * 48 * GiB)
    assert budget_from_memory(32 * GiB, 4 * GiB) == int(4 * GiB - 0.1 * 32 * GiB)


@pytest.mark.parametrize("total, available", [(None, 8 * GiB), (48 * GiB, None), (0, 1),
                                              (48 * GiB, 4 * GiB), (48 * GiB, 0)])
def test_unknown_figures_or_no_room_set_no_limit(total, available):
    assert budget_from_memory(total, available) is None


def test_this_machines_figures_give_a_budget_below_what_is_available():
    memory = system_memory()
    budget = budget_from_memory(memory.total, memory.available)
    assert budget is not None and 0 < budget < memory.available


def test_a_lean_run_hands_the_limit_to_the_part_that_sets_it(monkeypatch, standin_dir,
                                                             standin_weights):
    """The limit itself is set only on MPS (not here): what is checked is that ``working``
    hands it on — a spy around the real ``models.install``, which still runs."""
    from stageload.pixal3d.lean import models as lean_model

    given = []
    real = lean_model.install
    monkeypatch.setattr(lean_model, "install", lambda *a, **kw: given.append(kw) or real(*a, **kw))
    run = new_run(standin_dir, load="eager", working_memory="port")
    try:
        run.hooks.remove()  # the pipeline alone
        done = working.install(run.pipeline, None, "lean", mps_limit_bytes=5 * GiB)
        assert done.installed == ["conditioning", "models"]
        assert given and given[0]["mps_limit_bytes"] == 5 * GiB
        done.remove()
    finally:
        run.close()
