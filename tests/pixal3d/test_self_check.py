"""The deep self-check (stageload.pixal3d.selfcheck) on the stand-in port, on the CPU: every
part runs the lean path and the port's own on the same inputs and agrees; a lean part broken on
purpose (a mutation of its arithmetic) is named as differing while the others still agree; what
cannot be checked without MPS is said, with why; the comparison of two results catches a
difference in form, not only in value."""
from __future__ import annotations

import re

import pytest
import torch

from stageload.pixal3d.lean import attention as lean_attention
from stageload.pixal3d.lean import decoder_rows
from stageload.pixal3d.lean import models as lean_models
from stageload.pixal3d.selfcheck import compare, environment, sizes
from stageload.pixal3d.selfcheck.run import deep_check


def _check(standin_dir, **kwargs):
    events: list[dict] = []
    report = deep_check(standin_dir, device="cpu", emit=events.append, **kwargs)
    return report, events


@pytest.fixture(scope="module")
def passed(standin_dir, standin_weights):
    return _check(standin_dir)


def test_every_part_agrees_with_the_port_and_says_what_it_measured(passed):
    report, events = passed
    assert report["ok"] is True and report["device"] == "cpu"
    assert [e["part"] for e in events] == ["conditioning", "attention", "decoder"]
    assert [p["part"] for p in report["parts"]] == [e["part"] for e in events]
    for part in report["parts"]:
        assert part["status"] == "agrees" and part["ok"] is True, part
        assert 0 <= part["agreement"] <= sizes.BOUND
        for path in ("port", "lean"):
            assert part[path]["seconds"] > 0 and set(part[path]["memory"]) == {"process"}
        assert "CPU" in part["memory_measured"] and part["size"]
    conditioning, attention, decoder = report["parts"]
    assert any("sampled_projection" in said for said in conditioning["said"])
    assert any("slice_attention" in said for said in attention["said"])
    # the decoder ran by voxel ranges (its lean forward, not the port's after a warning)
    assert any(said.startswith("decoder_rows") and "bytes saved" in said
               for said in decoder["said"]), decoder["said"]
    # lean's slices held less than the port's 2,048-query chunks
    assert attention["lean"]["memory"]["process"] < attention["port"]["memory"]["process"]



def test_a_check_after_others_still_measures_lean_s_own_slices(standin_dir, standin_weights,
                                                               passed):
    """In a process where earlier checks freed more than a path needs, lean's attention still
    measures at least half its own slice's scores and less than the port's chunks. The measure
    empties glibc's free lists before each path so that a path's pages are its own; without it
    a warm process's repeated checks measured lean's attention at 0 bytes (three checks in one
    process here), and a CI run once measured the port's at 33 MB against lean's 84."""
    for _ in range(2):  # the full check of ``passed``, then two more in the same process
        report, _ = _check(standin_dir, parts=["attention"])
    (attention,) = report["parts"]
    heads = int(re.search(r"(\d+) heads?", attention["size"]).group(1))
    n = sizes.ATTENTION_TOKENS
    one_slice = heads * (n // sizes.ATTENTION_SLICES) * n * 4  # a slice's fp32 scores, bytes
    lean, port = attention["lean"]["memory"]["process"], attention["port"]["memory"]["process"]
    assert one_slice / 2 <= lean < port, (lean, port, one_slice)

def test_without_mps_it_says_what_it_could_not_check_and_why(passed):
    report, _ = passed
    if torch.backends.mps.is_available():
        pytest.skip("this machine has MPS: nothing is left unchecked")
    assert report["mps"]["used"] is False and report["mps"]["why"]
    assert report["unchecked"] and report["unchecked"][0].startswith("MPS memory")
    assert report["mps"]["why"] in report["unchecked"][0]
    assert report["backends"]["attention"] == "naive"  # the stand-in's choice, read live
    assert {m["module"] for m in report["metal"]} == set(environment.METAL_PACKAGES)
    assert all((m["effect"] is None) == m["found"] for m in report["metal"])


def _scaled(function):
    def broken(*args, **kwargs):
        return function(*args, **kwargs) * 1.01
    return broken


@pytest.mark.parametrize("part", ["conditioning", "attention", "decoder"])
def test_a_broken_lean_part_is_named_and_the_others_still_agree(standin_dir, standin_weights,
                                                                monkeypatch, part):
    if part == "conditioning":  # NAF's output at the sampled pixels, one per cent off
        monkeypatch.setattr(lean_attention, "upsample_at", _scaled(lean_attention.upsample_at))
    elif part == "attention":  # the sliced arithmetic, one per cent off
        monkeypatch.setattr(lean_models, "naive_attention",
                            _scaled(lean_models.naive_attention))
    else:  # each range's convolution rows one per cent off: seen only where lean decodes
        rows = decoder_rows.conv_rows

        def off(*args, **kwargs):
            return rows(*args, **kwargs) * 1.01
        monkeypatch.setattr(decoder_rows, "conv_rows", off)
    report, events = _check(standin_dir)
    assert report["ok"] is False
    statuses = {p["part"]: p["status"] for p in report["parts"]}
    assert statuses == {name: "differs" if name == part else "agrees" for name in statuses}
    broken = next(p for p in report["parts"] if p["part"] == part)
    assert broken["ok"] is False and broken["agreement"] > sizes.BOUND


def test_a_part_that_fails_is_reported_and_the_others_run(standin_dir, standin_weights,
                                                          monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("the lean conditioning could not be installed")
    monkeypatch.setattr("stageload.pixal3d.lean.conditioning.install", refuse)
    report, _ = _check(standin_dir, parts=["conditioning", "attention"])
    failed, attention = report["parts"]
    assert failed["status"] == "failed" and failed["ok"] is False
    assert "could not be installed" in failed["note"]
    assert attention["status"] == "agrees" and report["ok"] is False


def test_two_results_compare_in_form_and_value():
    a = {"feats": torch.ones(3, 2), "coords": torch.arange(3)}
    assert compare.agreement(a, a) == (0.0, None)
    shifted = {"feats": torch.ones(3, 2) * 1.5, "coords": torch.arange(3)}
    assert compare.agreement(shifted, a) == (pytest.approx(0.5), None)
    moved = {"feats": torch.ones(3, 2), "coords": torch.arange(3) + 1}
    assert "differs" in compare.agreement(moved, a)[1]
    assert "shape" in compare.agreement({"feats": torch.ones(4, 2)}, {"feats": torch.ones(3, 2)})[1]
    assert "tensors" in compare.agreement([torch.ones(1)], [torch.ones(1), torch.ones(1)])[1]
