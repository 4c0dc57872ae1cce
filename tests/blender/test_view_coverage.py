"""The panel's result line says how much of an export's texture came from the asset's voxels
(the bounded export engine's ``info.export.voxel_coverage``), checked where it enters: a value
that is not a share shows nothing."""
import json
from pathlib import Path

import pytest

from blender_addon.runner_client.state import JobState

FIX = Path(__file__).parent / "fixtures"


def _result_text(coverage) -> str:
    events = [json.loads(line) for line in (FIX / "builtin_goblin_512.ndjson").read_text()
              .splitlines() if line.strip()]
    st = JobState()
    st.begin(events[0]["image"], now=events[0]["t"])
    for ev in events:
        if ev["event"] == "result":
            ev = {**ev, "info": {**(ev.get("info") or {}),
                                 "export": {"voxel_coverage": coverage}}}
        st.apply(ev)
    return st.view(now=events[-1]["t"]).result_text


def test_the_result_line_names_the_texture_share_from_the_voxels():
    assert ", texture 97.31 % from the voxels" in _result_text(0.973088)
    assert ", texture 100.00 % from the voxels" in _result_text(1)


@pytest.mark.parametrize("junk", ["0.97", True, 1.5, -0.1, None, [0.9]])
def test_a_value_that_is_not_a_share_shows_nothing(junk):
    assert "from the voxels" not in _result_text(junk)
