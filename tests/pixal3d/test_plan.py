"""Stage plans and the keep-resident policy (pure functions)."""
import pytest

from stageload.pixal3d import STAGES, keep_across_gap, plan_for


def test_plan_follows_spec_order_and_1536_matches_1024():
    plan = plan_for("1024_cascade")
    assert tuple(plan) == STAGES
    assert plan["shape_512"] == ("image_cond_backbone", "naf", "shape_slat_flow_model_512",
                                 "shape_slat_decoder")
    assert plan["decode"] == ("shape_slat_decoder", "tex_slat_decoder")
    assert plan["export"] == () and plan["setup"] == ()
    assert plan_for("1536_cascade") == plan
    with pytest.raises(ValueError, match="1024_cascade"):
        plan_for("512")


def test_keep_across_gap_within_budget_soonest_first():
    plan = plan_for("1024_cascade")
    loaded = {"shape_slat_decoder": 900, "shape_slat_flow_model_512": 2600, "naf": 10,
              "image_cond_backbone": 1200}
    assert keep_across_gap(plan, "shape_1024", loaded, 0) == []
    assert keep_across_gap(plan, "shape_1024", loaded, 899) == []
    assert keep_across_gap(plan, "shape_1024", loaded, 900) == ["shape_slat_decoder"]
    # the 512 flow is never needed again: not kept whatever the budget
    assert keep_across_gap(plan, "shape_1024", loaded, 10 ** 12) == ["shape_slat_decoder"]
    # at decode the decoder is listed, so it is not a gap any more
    assert keep_across_gap(plan, "decode", {"shape_slat_decoder": 900}, 10 ** 12) == []
    with pytest.raises(ValueError):
        keep_across_gap(plan, "nope", loaded, 0)


def test_the_stage_list_has_one_source_and_it_needs_no_torch():
    """runner.backends (the add-on reads the runner's constants) and the pixal3d backend take
    the stage list from stageload.pixal3d.plan, which imports neither torch nor the port."""
    import subprocess
    import sys

    from runner import backends
    from runner.backends import pixal3d as backend
    from stageload.pixal3d.plan import STAGES
    assert backend.STAGES is STAGES and backends.get("pixal3d").stages == tuple(STAGES)
    probe = ("import sys, stageload.pixal3d.plan, runner.backends; "
             "print(sorted(m for m in sys.modules "
             "if m.split('.')[0] in ('torch', 'pixal3d', 'generate_mps')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         timeout=60)
    assert out.stdout.strip() == "[]"
