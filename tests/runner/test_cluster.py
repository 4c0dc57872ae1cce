"""The folder batch on a real Ray cluster of several nodes on this machine
(``ray.cluster_utils.Cluster``: the head and one more node each offering one ``image_to_mesh``
slot and 2 GiB to Ray, a third offering a slot but only 256 MiB), built-in backend, small copies of
tests/data/images. One cluster serves the whole module (starting one takes 10-25 s here); its
nodes run the real ``python -m runner`` job of each image. The head's batch is the real
``python -m runner batch … --cluster ADDRESS`` subprocess.

Slow jobs for the kill and cancel tests come from the worker test hook
(``worker_hook/sitecustomize.py``): the nodes inherit ``$RUNNER_TEST_WORKER_HOOK``, which runs
the file ``HOOK`` names when it exists — it sleeps in the worker of the images whose SHA-256 it
lists.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from .conftest import REPO, WORKER_HOOK, Finished, Live, parse_stdout, wait_gone

ray = pytest.importorskip("ray", reason="the cluster extra (ray) is not installed; "
                                        "`make setup` installs it")

IMAGES = REPO / "tests" / "data" / "images"
SIX = ["character_1.png", "typical_humanoid_block_robot.png", "typical_humanoid_dragonborn.png",
       "typical_humanoid_dwarf.png", "typical_humanoid_goblin.png", "yoimiya_1.png"]
MB = 1 << 20
NODE = dict(num_cpus=1, object_store_memory=80 * MB)
HOOK_CODE = ("import os\n_p = os.environ.get('CLUSTER_TEST_HOOK')\n"
             "if _p and os.path.exists(_p):\n    exec(open(_p).read())\n")
#: the worker of each job takes the next number (a file created with O_EXCL in {folder});
#: the first {fast} are fast, every later one sleeps {seconds} s before its first stage
SLOW = ("import os, time\n_i = 0\nwhile True:\n    try:\n"
        "        os.close(os.open(os.path.join({folder!r}, str(_i)), os.O_CREAT | os.O_EXCL))\n"
        "        break\n    except FileExistsError:\n        _i += 1\n"
        "if _i >= {fast}:\n    time.sleep({seconds})\n")
JOB = ["--texture-size", "512"]


def small_images(folder: Path, names=SIX, side=160) -> Path:
    """Copies of ``names`` from tests/data/images scaled to ``side`` px (fast jobs)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        im = Image.open(IMAGES / name)
        im.thumbnail((side, side))
        im.save(folder / name)
    return folder


class Nodes:
    """The module's cluster: ``address``, ``big`` (two nodes with 2 GiB), ``small`` (256 MiB),
    ``hook`` (the hook file path), ``slow(paths, seconds)`` to make those images slow."""

    def __init__(self, cluster, hook: Path):
        self.cluster, self.hook = cluster, hook
        self.address = cluster.address
        self.big, self.small = [], None

    def id_of(self, node) -> str:
        return node.node_id

    def slow(self, seconds: float, fast: int = 0) -> None:
        """From now on the first ``fast`` jobs to start are fast, later ones sleep."""
        folder = self.hook.parent / f"starts-{time.monotonic_ns()}"
        folder.mkdir()
        self.hook.write_text(SLOW.format(folder=str(folder), fast=fast, seconds=seconds))

    def fast(self) -> None:
        self.hook.unlink(missing_ok=True)


def _ray_processes(session_dir: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(session_dir in part for part in p.info["cmdline"] or []):
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    from ray.cluster_utils import Cluster

    hook = tmp_path_factory.mktemp("cluster-hook") / "hook.py"
    saved = dict(os.environ)
    os.environ.update({
        "PYTHONPATH": os.pathsep.join([str(WORKER_HOOK), str(REPO),
                                       os.environ.get("PYTHONPATH", "")]),
        "RUNNER_TEST_WORKER_HOOK": HOOK_CODE, "CLUSTER_TEST_HOOK": str(hook),
        # the guards on the nodes reserve among themselves only (not other tests' guards)
        "STAGELOAD_GUARD_DIR": str(tmp_path_factory.mktemp("cluster-guards")),
        # a lost node is noticed within about 2 s instead of about 30 s
        "RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500",
        "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "0",
    })
    cluster = None
    try:
        cluster = Cluster(initialize_head=True, head_node_args=dict(
            NODE, include_dashboard=False, resources={"image_to_mesh": 1}, memory=2048 * MB))
        n = Nodes(cluster, hook)
        n.big = [cluster.head_node,
                 cluster.add_node(**NODE, resources={"image_to_mesh": 1}, memory=2048 * MB)]
        n.small = cluster.add_node(**NODE, resources={"image_to_mesh": 1}, memory=256 * MB)
        cluster.wait_for_nodes()
        session = cluster.head_node.get_session_dir_path()
        yield n
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if cluster is not None:
            cluster.shutdown()
            left = wait_gone(_ray_processes(session), within=10)
            for p in left:
                p.kill()
            assert not left, f"Ray processes outlived the cluster: {left}"


def batch(args, **kw) -> Finished:
    proc = subprocess.run([sys.executable, "-m", "runner", "batch", *map(str, args)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=kw.get("timeout", 180), cwd=REPO)
    return Finished(proc.returncode, parse_stdout(proc.stdout), proc.stdout, proc.stderr)


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())["images"]


def test_six_images_spread_over_two_nodes_equal_a_local_batch(nodes, tmp_path):
    """Both big nodes ran images, the 256 MiB node (less than --need 1G) none; every GLB is
    byte for byte the local batch's; each record names its node; events carry it. A bad
    image among them is one failed record, tried once, never again."""
    src = small_images(tmp_path / "in")
    (src / "broken.png").write_bytes(b"not a picture")
    out, local = tmp_path / "out", tmp_path / "local"
    r = batch([src, "-o", out, "--cluster", nodes.address, "--need", "1G", *JOB])
    assert r.returncode == 5, r.stderr[-3000:]
    assert r.last()["event"] == "batch_done" and (r.last()["done"], r.last()["failed"]) == (6, 1)
    records = manifest(out)
    bad = records.pop("broken.png")
    assert bad["status"] == "failed" and bad["error"]["kind"] == "not_an_image"
    assert bad["retries"] == [] and bad["node"]["id"]
    placed = [e for e in r.events if e["event"] == "placed"]
    assert sorted(e["item"] for e in placed) == list(range(1, 8))  # each image once
    ran_on = {rec["node"]["id"] for rec in records.values()}
    big = {n.node_id for n in nodes.big}
    assert ran_on == big, (ran_on, big)
    assert nodes.small.node_id not in {e["node"]["id"] for e in placed}
    assert all(rec["status"] == "done" and rec["retries"] == [] and rec["node"]["host"]
               for rec in records.values())
    stages = [e for e in r.events if e["event"] == "stage" and "item" in e]
    assert stages and all(e["node"]["id"] in big for e in stages)
    lr = batch([src, "-o", local, "--need", "1G", *JOB])
    assert lr.returncode == 5, lr.stderr[-3000:]
    for name in SIX:
        glb = Path(name).stem + ".glb"
        assert (out / glb).read_bytes() == (local / glb).read_bytes(), glb
        assert (out / (Path(name).stem + ".trace.jsonl")).exists()
    assert not list(out.glob(".*"))  # no partial file, no claim left
    assert "SIGTERM handler is not set" not in r.stderr  # Ray's noise, filtered (finding 6)


def test_a_nodes_error_names_the_users_image_not_its_temporary_file(nodes, tmp_path):
    """The node runs the picture as ``input.png`` in its own folder; the error the person reads
    (stderr, the ``error`` in the manifest and in ``batch_item``) names ``c.png``."""
    src = small_images(tmp_path / "in", names=["typical_humanoid_goblin.png"])
    whole = (src / "typical_humanoid_goblin.png").read_bytes()
    (src / "typical_humanoid_goblin.png").unlink()
    (src / "c.png").write_bytes(whole[:len(whole) // 2])
    out = tmp_path / "out"
    r = batch([src, "-o", out, "--cluster", nodes.address, *JOB])
    assert r.returncode == 5, r.stderr[-3000:]
    error = manifest(out)["c.png"]["error"]
    assert error["kind"] == "image_truncated", error
    item = [e for e in r.events if e["event"] == "batch_item"][0]
    line = [x for x in r.stderr.splitlines() if x.startswith("runner: image_truncated: ")]
    assert line, r.stderr[-3000:]
    for said in (error["message"], item["error"]["message"], line[0]):
        assert "c.png is truncated" in said and "input.png" not in said, said
        assert "image-to-mesh-node-" not in said, said


def test_a_cluster_folder_whose_manifest_is_deleted_resumes_from_its_traces(nodes, tmp_path):
    """The trace a node sends back is written as this batch's trace of the image (its
    ``hello`` the item's, the user's paths throughout), so a deleted manifest is rebuilt from
    it and the finished image skipped — not failed with ``output_exists``."""
    src = small_images(tmp_path / "in", names=["typical_humanoid_goblin.png"])
    out = tmp_path / "out"
    first = batch([src, "-o", out, "--cluster", nodes.address, *JOB])
    assert first.returncode == 0, first.stderr[-3000:]
    trace = out / "typical_humanoid_goblin.trace.jsonl"
    text = trace.read_text()
    hello = json.loads(text.splitlines()[0])
    assert hello["mode"] == "batch_item"
    assert hello["image"] == str(src / "typical_humanoid_goblin.png")
    assert hello["output"] == str(out / "typical_humanoid_goblin.glb") and hello["sha256"]
    assert "input.png" not in text, text[:3000]
    (out / "manifest.json").unlink()
    again = batch([src, "-o", out, "--cluster", nodes.address, *JOB])
    assert again.returncode == 0, again.stderr[-3000:]
    assert [e["status"] for e in again.events if e["event"] == "batch_item"] == ["skipped"]
    assert "rebuilt 1 finished image(s)" in again.stderr


def test_nodes_that_cannot_run_the_backend_are_left_out_and_named(nodes, tmp_path):
    """On the real nodes: no node has the Pixal3D folder given, so the
    first image to reach each big node fails there with pixal3d_missing; that node is left out
    for the batch (one warning each), the image is placed again on the other, and when none is
    left both images fail with pixal3d_missing naming the nodes — no more than one attempt per
    node per image, none after the batch knows."""
    src = small_images(tmp_path / "in", SIX[:2], side=64)
    out = tmp_path / "out"
    r = batch([src, "-o", out, "--cluster", nodes.address, "--need", "1G", "--backend",
               "pixal3d", "--pixal3d-dir", tmp_path / "no-pixal3d", *JOB])
    assert r.returncode == 5, r.stderr[-3000:]
    warnings = [e for e in r.events if e["event"] == "warning"]
    big = {n.node_id for n in nodes.big}
    assert {w["node"]["id"] for w in warnings} == big and len(warnings) == 2, warnings
    assert all(w["kind"] == "pixal3d_missing" and w["node"]["host"] in w["message"]
               for w in warnings)
    placed = [e for e in r.events if e["event"] == "placed"]
    assert 2 <= len(placed) <= 4 and {e["node"]["id"] for e in placed} <= big, placed
    records = manifest(out)
    assert len(records) == 2
    for rec in records.values():
        assert rec["status"] == "failed" and rec["error"]["kind"] == "pixal3d_missing", rec
        assert rec["error"]["message"].startswith("No node of the cluster can run this job")
        assert rec["error"]["message"].count("node ") >= 2, rec["error"]["message"]
        assert all(t["reason"].startswith("pixal3d_missing: ") for t in rec["retries"])
    assert not list(out.glob("*.glb"))


def test_check_lists_the_nodes(nodes):
    proc = subprocess.run([sys.executable, "-m", "runner", "check", "--cluster", nodes.address],
                          capture_output=True, text=True, timeout=240, cwd=REPO)
    (ev,) = parse_stdout(proc.stdout)
    assert proc.returncode == 0 and ev["event"] == "check" and ev["ok"], proc.stderr[-2000:]
    rows = {row["id"]: row for row in ev["cluster"]["nodes"]}
    assert rows[nodes.small.node_id]["memory"] == 256 * MB
    assert rows[nodes.small.node_id]["slots"] == 1
    for node in nodes.big:
        row = rows[node.node_id]
        assert (row["memory"], row["slots"]) == (2048 * MB, 1)
        assert row["backends"]["builtin"]["ok"] is True
        assert row["backends"]["pixal3d"]["ok"] is False  # no Pixal3D folder given
    assert len(rows) == 3
    # for a person: a line per node and backend, the verdict; and not
    # Ray's "SIGTERM handler is not set" warning (its other messages still pass)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("runner: check: ")]
    assert sum(ln.startswith("runner: check: node ") for ln in lines) == 3, proc.stderr
    assert sum("  builtin: ok" in ln for ln in lines) == 3, proc.stderr
    assert sum("  pixal3d: cannot run: " in ln for ln in lines) == 3, proc.stderr
    assert lines[-1] == "runner: check: ready for builtin on 3 node(s): " + ", ".join(
        row["host"] for row in ev["cluster"]["nodes"]), proc.stderr
    assert "SIGTERM handler is not set" not in proc.stderr, proc.stderr
    # this cluster was started without RAY_AUTH_MODE=token: said, and warned about
    assert ev["cluster"]["auth"] == {"required": False, "token_from": None}
    assert "runner: check: token authentication: NOT required" in proc.stderr
    (warning,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("runner: warning: ")]
    assert "does not require a token" in warning and "RAY_AUTH_MODE=token" in warning


def test_cluster_unavailable_wrong_address_and_no_ray(tmp_path):
    """Nothing answers at the address → cluster_unavailable (37) naming it, before the output
    folder is made; the same with Ray hidden from the runner's Python."""
    import socket

    src = small_images(tmp_path / "in", SIX[:1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    address = f"127.0.0.1:{port}"
    r = batch([src, "-o", tmp_path / "out", "--cluster", address])
    assert r.returncode == 37, r.stderr[-2000:]
    assert r.kinds() == ["hello", "error"] and r.last()["kind"] == "cluster_unavailable"
    assert address in r.last()["message"] and "docs/cluster.md" in r.last()["hint"]
    assert not (tmp_path / "out").exists()
    code = ("import runpy, sys; sys.modules['ray'] = None; "
            "sys.argv = ['runner'] + sys.argv[1:]; runpy.run_module('runner', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code, "batch", str(src), "-o",
                           str(tmp_path / "out"), "--cluster", "10.0.0.1:6379"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    ev = parse_stdout(proc.stdout)
    assert proc.returncode == 37 and ev[-1]["kind"] == "cluster_unavailable", proc.stderr
    assert "not installed" in ev[-1]["message"] and "10.0.0.1:6379" in ev[-1]["message"]
    assert "image-to-mesh[cluster]" in ev[-1]["hint"]
    assert not (tmp_path / "out").exists()


def _job_pids(events) -> list[psutil.Process]:
    """The runner supervisors the batch's nodes started (``placed`` pids, on this machine)
    and every process under them now."""
    procs = []
    for ev in events:
        if ev["event"] == "placed":
            try:
                root = psutil.Process(ev["pid"])
                procs += [root] + root.children(recursive=True)
            except psutil.NoSuchProcess:
                pass
    return procs


def test_cancel_leaves_no_process_and_the_next_run_does_the_rest(nodes, tmp_path):
    """Two images done, two running (sleeping workers) on the two big nodes: SIGTERM to the
    batch → within 5 s no runner or worker of any job is left (by pid), exit 130, no GLB or
    partial file for the two; the next run skips the two done and does the other two."""
    import tempfile

    src = small_images(tmp_path / "in", SIX[:4])
    out = tmp_path / "out"
    nodes.slow(seconds=60, fast=2)
    live = Live(["batch", src, "-o", out, "--cluster", nodes.address, "--need", "1G", *JOB])
    try:
        done = set()
        sleeping = set()
        while len(done) < 2 or len(sleeping) < 2:
            ev = live.wait_for_any(("batch_item", "guard"), timeout=60)
            if ev["event"] == "batch_item":
                done.add(ev["index"])
            elif ev.get("state") == "started":
                sleeping.add(ev["item"])
            sleeping -= done
        procs = _job_pids(e for e in list(live.events) if e.get("item") in sleeping)
        assert len(procs) >= 4, procs  # two runners and their workers
        live.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        left = wait_gone(procs, within=5)
        assert not left, f"{left} alive {time.monotonic() - t0:.1f} s after the cancel"
        r = live.finish(timeout=30)
    except AssertionError as exc:
        live.kill()
        live._err.join(5)
        raise AssertionError(f"{exc}\nstderr: {live.stderr[-3000:]}") from None
    finally:
        live.kill()
        nodes.fast()
    assert r.returncode == 130 and r.last()["kind"] == "cancelled", r.stderr[-3000:]
    records = manifest(out)
    names = sorted(src.iterdir())
    for index in sleeping:
        name = names[index - 1]
        assert records[name.name]["status"] == "cancelled"
        assert not (out / (name.stem + ".glb")).exists()
    assert not list(out.glob(".*"))  # no partial file, no claim
    assert not list(Path(tempfile.gettempdir()).glob("image-to-mesh-node-*"))
    again = batch([src, "-o", out, "--cluster", nodes.address, "--need", "1G", *JOB])
    assert again.returncode == 0, again.stderr[-3000:]
    assert (again.last()["skipped"], again.last()["done"]) == (2, 2)
    assert sorted(e["item"] for e in again.events if e["event"] == "placed") == sorted(sleeping)


def test_a_node_lost_mid_job_its_image_is_finished_elsewhere(nodes, tmp_path):
    """Runs last (it removes a big node). Two slow images start on the two big nodes; the
    node that is not the head is killed (all its Ray processes): the runner and worker of its
    image end, that image runs again on the head, the manifest records the retry."""
    src = small_images(tmp_path / "in", SIX[:2])
    out = tmp_path / "out"
    nodes.slow(seconds=3)
    live = Live(["batch", src, "-o", out, "--cluster", nodes.address, "--need", "1G", *JOB])
    try:
        started = {}
        while len(started) < 2:
            ev = live.wait_for_any(("guard",), timeout=120)
            if ev.get("state") == "started":
                started[ev["item"]] = ev["node"]["id"]
        victim = nodes.big[1]
        item = next(i for i, node in started.items() if node == victim.node_id)
        procs = _job_pids(e for e in list(live.events) if e.get("item") == item)
        nodes.cluster.remove_node(victim, allow_graceful=False)
        nodes.big.remove(victim)
        assert not wait_gone(procs, within=5), "the lost node's job outlived it"
        r = live.finish(timeout=120)
    finally:
        live.kill()
        nodes.fast()
    assert r.returncode == 0, r.stderr[-3000:]
    rec = manifest(out)[SIX[item - 1]]
    assert rec["status"] == "done" and rec["node"]["id"] == nodes.big[0].node_id
    assert len(rec["retries"]) == 1 and rec["retries"][0]["node"]["id"] == victim.node_id
    assert manifest(out)[SIX[2 - item]]["retries"] == []
    attempts = [e["attempt"] for e in r.events if e["event"] == "placed" and e["item"] == item]
    assert attempts == [1, 2]
