"""The add-on's batch on a Ray cluster: the cluster address preference (checked
where it enters, a batch's only: the Generate command line never carries ``--cluster``), the
per-node lines made from a real recorded cluster batch (fixtures/cluster_batch_2nodes.ndjson,
``python -m runner batch … --cluster`` on a 2-node ``ray.cluster_utils.Cluster``), and one
end-to-end Run Batch in the real ``bpy`` 4.5 module on a real 2-node cluster (each GLB imported
as it arrives), then headless.py's batch on the same cluster; Ray missing from the runner's
Python (the bpy 5 venv, which holds no Ray) reaches the panel as the runner's
``cluster_unavailable`` message.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from blender_addon.runner_client import job_spec as job
from blender_addon.runner_client import option_views
from blender_addon.runner_client.config import ConfigError
from blender_addon.runner_client.facts import options
from blender_addon.runner_client.nodes import NodeBoard

from .test_addon import bpy5_python, built_zip, scenario  # noqa: F401  (built_zip: a fixture)

HERE = Path(__file__).parent
REPO = HERE.parents[1]
FIXTURE = HERE / "fixtures" / "cluster_batch_2nodes.ndjson"
HEADLESS = REPO / "blender_addon" / "headless.py"
GOOD = ("auto", "10.0.0.5:6379", "ray://head.local:10001", "[::1]:6379", "mac-1.local:6379")
BAD = ("head", "head:", ":6379", "head:99999", "head:x", "ray://:10001", "my head:6379",
       "http://head:6379/")


def _settings(**values):
    return job.JobSettings(**values)


def test_generate_never_passes_cluster_and_the_batch_does(tmp_path):
    """The views filter the table by the runner's command: a single run's argv has no option
    the runner's ``run`` does not take (``--cluster`` above all), a batch's has ``--cluster``."""
    settings = _settings(cluster="10.0.0.5:6379", texture_size="512", seed=3)
    spec = job.JobSpec(image=tmp_path / "a.png", output=tmp_path / "a.glb",
                       trace=tmp_path / "a.jsonl", settings=settings)
    run, batch = spec.argv("/py"), spec.batch_argv("/py", tmp_path, tmp_path / "out")
    assert "--cluster" not in run
    assert batch[batch.index("--cluster") + 1] == "10.0.0.5:6379"
    flags = {o.flag: o for o in options.table()}
    for argv, command in ((run, "run"), (batch, "batch")):
        given = [w for w in argv if w in flags]
        assert given and all(flags[w].takes(command) for w in given), (command, given)
    assert "--cluster" not in job.JobSpec(image=tmp_path, output=tmp_path, trace=tmp_path,
                                          settings=_settings()).batch_argv("/py", tmp_path,
                                                                           tmp_path)
    for opt in options.addon_options():
        for command in ("run", "batch"):
            assert (opt in options.addon_options(command=command)) == (command in opt.commands)
    assert option_views.job_argv({"cluster": "auto"}, "builtin", "run") == \
        option_views.job_argv({}, "builtin", "run")


def test_the_token_file_preference_is_a_file_path_passed_only_with_a_cluster(tmp_path):
    """The Cluster token file preference: a file path (FILE_PATH) among the preferences, never
    a scene setting (so never in a .blend); a batch passes its absolute path as
    --cluster-token-file next to --cluster and nothing without a cluster; Generate never."""
    opt = options.get("cluster_token_file")
    assert opt.panel.where == "preferences" and opt.panel.section == "cluster"
    kind, kw = option_views.property_spec(opt)
    assert kind == "StringProperty" and kw["subtype"] == "FILE_PATH" and kw["default"] == ""
    assert opt not in options.addon_options("scene")
    token = tmp_path / "auth_token"
    spec = job.JobSpec(image=tmp_path / "a.png", output=tmp_path / "a.glb",
                       trace=tmp_path / "a.jsonl",
                       settings=_settings(cluster="10.0.0.5:6379", cluster_token_file=str(token)))
    batch = spec.batch_argv("/py", tmp_path, tmp_path / "out")
    assert batch[batch.index("--cluster-token-file") + 1] == str(token)
    assert "--cluster-token-file" not in spec.argv("/py")
    alone = job.JobSpec(image=tmp_path, output=tmp_path, trace=tmp_path,
                        settings=_settings(cluster_token_file=str(token)))
    assert "--cluster-token-file" not in alone.batch_argv("/py", tmp_path, tmp_path)
    assert option_views.property_spec(options.get("pixal3d_dir"))[1]["subtype"] == "DIR_PATH"


def test_a_token_file_that_is_not_a_file_is_said_where_it_is_typed(tmp_path):
    """The preferences and the Batch box say so in red and Run Batch stays off (the panel
    disables it on any ``cluster_problem``); nothing is said without a cluster address."""
    from types import SimpleNamespace

    from blender_addon.ui.preferences import cluster_problem

    token = tmp_path / "auth_token"
    prefs = SimpleNamespace(cluster="10.0.0.5:6379", cluster_token_file=str(token))
    assert f"Cluster token file {token} is not a file" in cluster_problem(prefs)
    token.write_text("t")
    assert cluster_problem(prefs) == ""
    assert "is not a file" in cluster_problem(SimpleNamespace(
        cluster="auto", cluster_token_file=str(tmp_path)))  # a folder
    assert cluster_problem(SimpleNamespace(cluster="", cluster_token_file="/nowhere")) == ""


def test_the_cluster_address_is_checked_where_it_enters():
    """The preference's value goes through the table's check (the runner's own, so the two
    never disagree); a bad one stops a batch with what to give, never Generate."""
    from meshfacts.errors import RunnerError
    from runner.cluster.connect import parse_address

    for good in GOOD:
        assert _settings(cluster=good).cluster == good
        parse_address(good)
    for bad in BAD:
        with pytest.raises(ConfigError) as err:
            _settings(cluster=bad)
        assert f"Cluster address {bad!r} is not a Ray address" in str(err.value)
        assert "auto, HOST:PORT" in str(err.value)
        with pytest.raises(RunnerError):
            parse_address(bad)
    prefs = type("Prefs", (), {"cluster": "head"})()
    assert job.settings_from(prefs, command="run").cluster == ""
    with pytest.raises(ConfigError):
        job.settings_from(prefs, command="batch")


def _events(path: Path = FIXTURE) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_node_lines_from_a_recorded_cluster_batch():
    """The recorded batch (3 images, 2 nodes on one host) fed event by event: while both run,
    one line per node naming its image, stage and memory; at the end both idle with their last
    image; every stage of every image is in the history, on the node it ran on."""
    events = _events()
    placed = {e["item"]: e for e in events if e["event"] == "placed"}
    board, seen = NodeBoard(), []
    for ev in events:
        board.apply(ev)
        if ev["event"] == "stage" and ev["stage"] == "export":
            seen.append(board.lines())
    ids = sorted({e["node"]["id"] for e in placed.values()})
    assert sorted(board.nodes) == ids and len(ids) == 2
    both = next(lines for lines in seen if sum(busy for _t, busy in lines) == 2)
    line = re.compile(r"vm · [0-9a-f]{8}: \S+\.png · (matte|shape|texture|export) \([1-4]/4\) "
                      r"\d+ % · [\d.]+ MiB, peak [\d.]+ MiB")
    for text, busy in both:
        assert busy and line.fullmatch(text), text
    assert any(" · export (4/4) " in text for text, _b in both), both
    names = {Path(e["image"]).name for e in placed.values()}
    assert {t.split(": ", 1)[1].split(" · ")[0] for t, _b in both} <= names
    last = {board.label(line): line.last for line in board.nodes.values()}
    assert sorted(last.values()) == ["typical_humanoid_goblin.png done", "yoimiya_1.png done"]
    assert all(not busy and "idle · last " in text for text, busy in board.lines())
    for ev in placed.values():
        stages = [h[3] for h in board.history if h[1] == Path(ev["image"]).name]
        assert [s for s in stages if s] == ["matte", "shape", "texture", "export"], stages


def test_node_events_are_checked_where_they_enter():
    """A node field of the wrong shape is dropped (the event is not a node's), an event of an
    image never placed on that node changes nothing, a local batch leaves the board empty."""
    board = NodeBoard()
    node = {"id": "ab" * 28, "host": "mac-2"}
    assert not board.apply({"v": 1, "event": "stage", "t": 1.0, "stage": "shape", "item": 1,
                            "node": {"id": 5, "host": "x"}})
    assert not board.apply({"v": 1, "event": "memory", "t": 1.0, "item": 1,
                            "node": {"id": "x" * 300, "host": "h"}})
    assert board.apply({"v": 1, "event": "stage", "t": 1.0, "stage": "shape", "item": 9,
                        "node": node})
    assert board.lines() == [("mac-2: idle", False)]
    assert board.apply({"v": 1, "event": "placed", "t": 1.0, "item": 1, "image": "/i/orc.png",
                        "node": node, "attempt": 2})
    board.apply({"v": 1, "event": "memory", "t": 2.0, "item": 1, "node": node,
                 "footprint": "lots"})
    board.apply({"v": 1, "event": "guard", "t": 2.0, "item": 1, "node": node,
                 "state": "waiting", "readings": {}})
    assert board.lines() == [("mac-2: orc.png · attempt 2 · waiting for memory", True)]
    local = NodeBoard()
    for ev in _events(HERE / "fixtures" / "builtin_goblin_512.ndjson"):
        assert not local.apply({**ev, "item": 1})
    assert local.lines() == []


# ---------------------------------------------------------------- on a real Ray cluster
@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """A real 2-node Ray cluster on this machine (``ray.cluster_utils.Cluster``), each node
    offering one ``image_to_mesh`` slot, set up as tests/runner/test_cluster.py's (its node
    figures and environment); every Ray process is gone afterwards."""
    pytest.importorskip("ray", reason="the cluster extra (ray) is not installed")
    from ray.cluster_utils import Cluster

    from tests.runner.conftest import wait_gone
    from tests.runner.test_cluster import MB, NODE, _ray_processes

    saved = dict(os.environ)
    os.environ.update({
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "STAGELOAD_GUARD_DIR": str(tmp_path_factory.mktemp("cluster-guards")),
    })
    cluster = session = None
    try:
        cluster = Cluster(initialize_head=True, head_node_args=dict(
            NODE, include_dashboard=False, resources={"image_to_mesh": 1}, memory=2048 * MB))
        cluster.add_node(**NODE, resources={"image_to_mesh": 1}, memory=2048 * MB)
        cluster.wait_for_nodes()
        session = cluster.head_node.get_session_dir_path()
        yield cluster
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if cluster is not None:
            cluster.shutdown()
        if session is not None:
            left = wait_gone(_ray_processes(session), within=10)
            for p in left:
                p.kill()
            assert not left, f"Ray processes outlived the cluster: {left}"


def _folder(tmp_path: Path, n: int) -> Path:
    from tests.runner.test_cluster import SIX, small_images

    return small_images(tmp_path / "pictures", SIX[:n])


@pytest.mark.slow
def test_run_batch_on_a_two_node_cluster_imports_each_result_as_it_arrives(
        two_nodes, built_zip, tmp_path):  # noqa: F811
    """Two images, two nodes of one slot each: both run at once, one per node; the panel shows
    a line per node (image, stage, memory) and the cluster preference; each GLB is imported
    as its batch_item arrives, the first while the other still runs."""
    folder = _folder(tmp_path, 2)
    v = scenario("cluster_batch", built_zip, tmp_path, str(folder), two_nodes.address,
                 timeout=240)
    assert v["result"] == ["FINISHED"] and v["finished"], v["_stdout"][-3000:]
    assert "--cluster" not in v["generate_argv"]
    assert v["argv"][v["argv"].index("--cluster") + 1] == two_nodes.address
    assert sorted(i[:2] for i in v["items"]) == [[p.name, "done"] for p in sorted(
        folder.iterdir())], v["items"]
    records = v["manifest"]["images"]
    ran_on = {r["node"]["id"] for r in records.values()}
    assert set(v["node_ids"]) == ran_on and len(ran_on) == 2  # both nodes ran images
    # every import as the controller made it: one object at a time, in the order the batch_items
    # arrived, the first while the batch still ran (not all at the batch's end), all imported
    imports = v["imports"]
    assert [(before, after) for _n, before, after, _r in imports] == [(0, 1), (1, 2)], imports
    assert [n for n, *_ in imports] == [i[2] for i in v["items"]], (imports, v["items"])
    assert imports[0][3] is True, imports
    assert v["batch_objects"] == sorted(n for n, *_ in imports), v["batch_objects"]
    # per-node lines: both nodes busy at once at some moment, each naming image and stage
    busy = [ln for ln in v["lines_seen"] if sum(b for _t, b in ln) == 2]
    assert busy, v["lines_seen"]
    stages = {h[3] for h in v["history"] if h[3]}
    assert stages == {"matte", "shape", "texture", "export"}, v["history"]
    drawn = " ".join(e[1] for e in v["panel_running"] if e[0] == "label")
    for name in (p.name for p in folder.iterdir()):
        assert re.search(rf"vm · [0-9a-f]{{8}}: {re.escape(name)} ·", drawn), drawn
    assert ("prop", "cluster") in [tuple(e) for e in v["panel_running"]]
    assert not [e for e in v["panel_running"] if str(e[0]).startswith("BAD")]
    assert v["summary"].startswith("Batch: 2 of 2 done"), v["summary"]
    assert v["children_alive"] == []


@pytest.mark.slow
def test_headless_batch_takes_the_cluster_option(two_nodes, tmp_path):
    folder = _folder(tmp_path, 2)
    out, blend = tmp_path / "glbs", tmp_path / "cast.blend"
    proc = subprocess.run([sys.executable, str(HEADLESS), str(folder), "--glb", str(out),
                           "--blend", str(blend), "--cluster", two_nodes.address,
                           "--texture-size", "512"], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.glob("*.glb")) == sorted(
        p.stem + ".glb" for p in folder.iterdir())
    lines = proc.stderr.splitlines()
    assert any(ln.startswith("image-to-mesh: node ") and " · export (4/4)" in ln
               for ln in lines), proc.stderr[-3000:]
    assert sum(" imported as " in ln for ln in lines) == 2, proc.stderr[-3000:]
    assert blend.is_file()
    records = json.loads((out / "manifest.json").read_text())["images"]
    assert all(r["node"]["id"] for r in records.values())


def test_headless_refuses_cluster_for_one_image_and_a_bad_address(tmp_path, shared_images):
    image = str(shared_images[0])
    one = subprocess.run([sys.executable, str(HEADLESS), image, "--glb", str(tmp_path / "a.glb"),
                          "--cluster", "auto"], capture_output=True, text=True, timeout=120)
    assert one.returncode == 2 and "--cluster runs a batch" in one.stderr, one.stderr
    bad = subprocess.run([sys.executable, str(HEADLESS), str(tmp_path), "--glb",
                          str(tmp_path / "o"), "--cluster", "nowhere"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "is not a Ray address" in bad.stderr, bad.stderr
    assert not (tmp_path / "a.glb").exists() and not (tmp_path / "o").exists()


def test_ray_missing_from_the_runners_python_reaches_the_panel(built_zip, tmp_path):  # noqa: F811
    """The bpy 5 venv holds no Ray: the built-in backend runs in its Python, so the runner says
    cluster_unavailable (37), which the panel shows with the fix; a bad address is refused by
    Run Batch before anything starts, and Generate is not stopped by it."""
    folder = _folder(tmp_path, 1)
    v = scenario("cluster_refused", built_zip, tmp_path, str(folder), python=bpy5_python(),
                 timeout=180)
    assert v["bad_result"] == ["CANCELLED"]
    assert "Cluster address 'head-without-port' is not a Ray address" in v["bad_error"]
    bad_labels = " ".join(e[1] for e in v["bad_panel"] if e[0] == "label")
    assert "Leave it empty to run the batch on this machine" in bad_labels
    assert "--cluster" not in v["generate_argv"]
    assert v["result"] == ["FINISHED"] and v["finished"]
    assert v["argv"][v["argv"].index("--cluster") + 1] == "127.0.0.1:9"
    err = v["error"]
    assert err["kind"] == "cluster_unavailable" and err["exit_code"] == 37, err
    assert "Ray is not installed" in err["message"] and "127.0.0.1:9" in err["message"]
    assert "image-to-mesh[cluster]" in err["hint"]
    assert v["summary"].startswith("Batch did not run: Ray is not installed"), v["summary"]
    labels = " ".join(e[1] for e in v["panel"] if e[0] == "label")
    assert "Ray is not installed" in labels and "image-to-mesh[cluster]" in labels
