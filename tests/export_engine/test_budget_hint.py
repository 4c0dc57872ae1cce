"""The over-budget hint names a budget that fits and is not much larger than needed: the first
whole 256M step above the plan's peak (plus its margin) at which the plan, made again for that
budget, fits — not the peak rounded up to whole GiB (a 328 MiB step used to get "1G")."""
import re

import pytest

from bounded_export import BadAsset, budget
from meshfacts.units import parse_size

SIZES = [  # (faces, voxels, texture): the tester's 256-grid asset; a mid one; the 7.9 M asset
    (293_000, 300_000, 2048),
    (2_000_000, 2_500_000, 1024),
    (7_900_000, 10_100_000, 2048),
]


def _hint_budget(err: BadAsset) -> int:
    match = re.match(r"Give --export-budget (\d+[MG]) or more", err.hint)
    assert match, err.hint
    return parse_size(match.group(1))


@pytest.mark.parametrize("faces,voxels,texture", SIZES)
def test_the_hinted_budget_fits_and_is_the_next_step_above_the_peak(faces, voxels, texture):
    sizes = dict(faces=faces, voxels=voxels, target=1_000_000, texture=texture,
                 file_bytes=faces * 18)
    with pytest.raises(BadAsset, match="too large for an export budget") as info:
        budget.plan(budget=budget.MIN_BUDGET, **sizes)
    need = re.search(r"needs about ([\d.]+ [MG]iB)", info.value.message).group(1)
    hinted = _hint_budget(info.value)
    assert hinted % budget.SUGGEST_STEP == 0
    assert budget.plan(budget=hinted, **sizes).peak <= hinted  # it fits, planned for it
    first = -(-int(budget.plan(budget=hinted, **sizes).peak * budget.SUGGEST_MARGIN)
              // budget.SUGGEST_STEP) * budget.SUGGEST_STEP
    assert hinted <= max(first, budget.SUGGEST_STEP * 2), (need, hinted)


def test_the_testers_asset_gets_512m_not_1g():
    with pytest.raises(BadAsset) as info:
        budget.plan(budget=256 << 20, faces=293_000, voxels=300_000, target=1_000_000,
                    texture=2048, file_bytes=30 << 20)
    assert "seams step needs about 328" in info.value.message
    assert info.value.hint.startswith("Give --export-budget 512M or more")


def test_budget_flags_read_back():
    for size in (256 << 20, 768 << 20, 1 << 30, 5 << 30, 1280 << 20):
        assert parse_size(budget.budget_flag(size)) == size
    assert budget.budget_flag(768 << 20) == "768M" and budget.budget_flag(2 << 30) == "2G"
