"""``python -m bench.export_engine`` end to end on a tiny asset (a 32 grid, every run of the
plan at small sizes, a few thousand quality samples, the engine in the benchmark's worker
process): the results file, the traces it keeps, per-step figures read from them the way the
product writes them, and a sub-step that stops being measured failing the bench."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.export_engine import run as bench_run

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export_bench")
    out = tmp / "out"
    cmd = [sys.executable, "-m", "bench.export_engine", "--quick", "--resolution", "32",
           "--target", "1000", "--faces", "2000", "--texture", "512", "--textures", "1024",
           "--samples", "5000",
           "--via", "worker",
           "--out", str(out),
           "--work", str(tmp / "work"),
           "--picture", str(REPO / "tests" / "data" / "images" / "typical_humanoid_goblin.png")]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode in (0, 1), proc.stderr[-4000:]  # 1: a target missed at this size
    return {"out": out, "json": json.loads((out / "export_engine.json").read_text()),
            "table": (out / "table.md").read_text(), "rc": proc.returncode}


def test_every_run_measured_from_its_trace(result):
    r = result["json"]
    names = [x["name"] for x in r["runs"]]
    assert names == ["defaults", "budget_2g", "faces_2k", "texture_1024", "cores_1"]
    for x in r["runs"]:
        kept = result["out"] / f"{x['name']}.trace.jsonl.gz"  # results keep traces compressed
        assert not kept.with_suffix("").exists()
        again = bench_run.export_figures(kept)
        assert again == x["export"]
        assert set(bench_run.SUBSTEPS) <= set(x["export"]["substeps"])
        assert x["export"]["peak"] > 0 and x["tree_peak"] >= x["export"]["peak"] * 0.5
        assert x["modelled_port"]["process_peak"] > x["modelled_port"]["peak"] > 0
        assert x["name"] in result["table"]
    assert r["runs"][2]["input_faces"] == pytest.approx(2000, rel=0.02)
    assert r["runs"][4]["cores"] == 1 and r["runs"][4]["command"][:3] == ["taskset", "-c", "0"]
    assert {x["via"] for x in r["runs"]} == {"worker"} and r["complete"]
    assert r["analysis"]["slowest_step"] in bench_run.SUBSTEPS
    assert set(r["quality"]["checks"]) <= set(r["analysis"]["checks"])
    assert result["rc"] == (0 if all(r["analysis"]["checks"].values()) else 1)
    assert "NOT the full-size figures" in result["table"]


def test_a_sub_step_not_measured_fails(result, tmp_path):
    every = gzip.decompress((result["out"] / "defaults.trace.jsonl.gz").read_bytes()).decode()
    lines = [ln for ln in every.splitlines()
             if not ('"parent": "export"' in ln and '"stage": "seams"' in ln)]
    assert len(lines) < len(every.splitlines())
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines) + "\n")
    with pytest.raises(bench_run.MeasurementMissing, match="seams"):
        bench_run.export_figures(cut)


def test_report_regenerates_the_docs_block(result, tmp_path):
    from bench.export_engine import report
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{report.BEGIN}\nOLD\n{report.END}\nafter\n")
    r = result["json"]
    r["analysis"] = report.analyse(r)
    report.refresh_docs(r, result["out"], docs=(doc,))
    text = doc.read_text()
    assert "OLD" not in text and text.startswith("before\n") and text.endswith("after\n")
    assert report.tables(r) in text


def test_the_2g_budget_glb_has_its_quality_measured(result):
    from bench.export_engine import report

    r = result["json"]
    assert r["quality_budget_2g"]["target"] == 1000
    names = [f"{report.BUDGET_2G}{name}" for name in r["quality"]["checks"]]
    assert set(names) <= set(r["analysis"]["checks"])
    assert "Quality of the --export-budget 2G GLB" in result["table"]


def test_only_reruns_one_run_and_merges_it(result):
    """``--only faces_2k``: that row is measured again (its own time, said in the header), every
    other row and the quality are the first pass's, the order is kept."""
    before = json.loads((result["out"] / "export_engine.json").read_text())
    cmd = [sys.executable, "-m", "bench.export_engine", "--quick", "--resolution", "32",
           "--target", "1000", "--faces", "2000", "--texture", "512", "--textures", "1024",
           "--samples", "5000",
           "--via", "worker", "--out", str(result["out"]),
           "--work", str(result["out"].parent / "work"), "--only", "faces_2k",
           "--picture", str(REPO / "tests" / "data" / "images" / "typical_humanoid_goblin.png")]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode in (0, 1), proc.stderr[-4000:]
    after = json.loads((result["out"] / "export_engine.json").read_text())
    assert [x["name"] for x in after["runs"]] == [x["name"] for x in before["runs"]]
    assert after["measured"] == before["measured"] and after["complete"]
    for old, new in zip(before["runs"], after["runs"], strict=True):
        if new["name"] == "faces_2k":
            assert new["measured"] > before["measured"] and new["merged"]
        else:
            assert new["export"] == old["export"] and new["measured"] == old["measured"]
            assert not new.get("merged")
    assert after["quality"] == before["quality"]
    table = (result["out"] / "table.md").read_text()
    assert f"rows measured later with `--only`: faces_2k {after['runs'][2]['measured']}" in table
    bad = subprocess.run([c if c != "faces_2k" else "nonesuch" for c in cmd], cwd=REPO,
                         capture_output=True, text=True, timeout=300, check=False)
    assert bad.returncode != 0 and "no such run nonesuch" in bad.stderr


def test_a_quality_figure_not_measured_fails(result):
    """The topology check (and any of ``quality.CHECKS``) missing from a result — a figure
    that stopped being measured — is a target missed, not a row left out."""
    import copy

    from bench.export_engine import quality, report

    r = copy.deepcopy(result["json"])
    assert r["analysis"]["checks"][quality.TOPOLOGY_CHECK] == report.analyse(r)["checks"][
        quality.TOPOLOGY_CHECK]
    assert r["quality"]["topology"]["glb"]["faces"] == r["quality"]["faces"]
    del r["quality"]["checks"][quality.TOPOLOGY_CHECK], r["quality"]["topology"]
    r["analysis"] = report.analyse(r)
    assert r["analysis"]["checks"][quality.TOPOLOGY_CHECK] is False
    assert "topology not measured" in report.tables(r)
