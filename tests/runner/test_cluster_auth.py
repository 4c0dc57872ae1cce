"""A batch on a real Ray cluster that requires a token: two nodes on this machine started as
docs/cluster.md says (``RAY_AUTH_MODE=token ray start --head …`` and ``… ray start
--address=HEAD …``, the token in a file named by ``RAY_AUTH_TOKEN_PATH``), one cluster for the
module. The runner is the real ``python -m runner batch/check … --cluster ADDRESS`` subprocess
with a home folder of its own (so no ``~/.ray/auth_token`` of this machine is found): with the
token it runs, without it or with a wrong one it is refused with ``cluster_auth`` before any
image is touched; the add-on's headless batch passes its token file preference the same way.
Afterwards no process of the cluster is left.

Every port the two nodes open is chosen free here (``ray start`` would otherwise take fixed
defaults such as 52365 that another test's cluster may hold)."""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from .conftest import REPO, WORKER_HOOK, Finished, alive, parse_stdout, wait_gone

pytest.importorskip("ray", reason="the cluster extra (ray) is not installed; `make setup` "
                                  "installs it")

IMAGES = REPO / "tests" / "data" / "images"
TWO = ["character_1.png", "typical_humanoid_goblin.png"]
MB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_cli() -> str:
    here = Path(sys.executable).with_name("ray")
    return str(here) if here.exists() else shutil.which("ray")


def _ports(head: bool) -> list[str]:
    names = ["--node-manager-port", "--object-manager-port", "--metrics-export-port",
             "--dashboard-agent-grpc-port", "--dashboard-agent-listen-port",
             "--runtime-env-agent-port"]
    if head:
        names += ["--dashboard-port", "--ray-client-server-port"]
    return [f"{name}={_free_port()}" for name in names]


class TokenCluster:
    """The module's cluster: ``address`` (``127.0.0.1:PORT``), ``token_file``, ``home`` (a
    home folder without a Ray token), ``groups`` (the process groups ``ray start`` left)."""

    def __init__(self, root: Path):
        self.root = root
        # Ray's socket paths must stay under 108 bytes: a short folder, not pytest's
        self.temp = Path(tempfile.mkdtemp(prefix="ray-"))
        self.home = root / "home"
        self.home.mkdir()
        self.token_file = root / "cluster.token"
        self.token_file.write_text(secrets.token_hex(32) + "\n")
        self.address = f"127.0.0.1:{_free_port()}"
        self.groups: set[int] = set()
        self.env = {**os.environ, "RAY_AUTH_MODE": "token",
                    "RAY_AUTH_TOKEN_PATH": str(self.token_file), "HOME": str(self.home),
                    "PYTHONPATH": os.pathsep.join([str(WORKER_HOOK), str(REPO),
                                                   os.environ.get("PYTHONPATH", "")]),
                    "STAGELOAD_GUARD_DIR": str(root / "guards")}
        self.env.pop("RAY_AUTH_TOKEN", None)

    def start(self, head: bool) -> None:
        where = ["--head", f"--port={self.address.split(':')[1]}", "--include-dashboard=false",
                 f"--temp-dir={self.temp}"] if head else [f"--address={self.address}"]
        argv = [_ray_cli(), "start", *where, "--node-ip-address=127.0.0.1", "--num-cpus=1",
                f"--memory={2048 * MB}", f"--object-store-memory={80 * MB}",
                "--resources={\"image_to_mesh\": 1}", "--disable-usage-stats", *_ports(head)]
        # a session of its own: every daemon it leaves is in this process group
        proc = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        self.groups.add(proc.pid)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out[-3000:]

    def processes(self) -> list[psutil.Process]:
        """Every process of the cluster: in its process groups, naming its temp folder, and
        below those (Ray's workers start groups of their own)."""
        found = {}
        for p in psutil.process_iter(["cmdline"]):
            try:
                if os.getpgid(p.pid) in self.groups or \
                        any(str(self.temp) in part for part in p.info["cmdline"] or []):
                    found[p.pid] = p
            except (psutil.Error, OSError):
                pass
        for p in list(found.values()):
            try:
                found.update({c.pid: c for c in p.children(recursive=True)})
            except psutil.Error:
                pass
        return alive(list(found.values()))

    def stop(self) -> list[psutil.Process]:
        """SIGTERM every process of the cluster, SIGKILL what is left after 10 s (Ray's agents
        ignore SIGTERM once their raylet is gone); returns what still runs."""
        procs = self.processes()
        for sig, within in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            for p in alive(procs):
                try:
                    p.send_signal(sig)
                except psutil.Error:
                    pass
            procs = wait_gone(procs, within)
        return alive(procs + self.processes())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = TokenCluster(tmp_path_factory.mktemp("token-cluster"))
    try:
        c.start(head=True)
        c.start(head=False)
        yield c
    finally:
        left = c.stop()
        shutil.rmtree(c.temp, ignore_errors=True)
        assert not left, f"processes of the cluster outlived it: {left}"


def _images(folder: Path, names=TWO, side=128) -> Path:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        im = Image.open(IMAGES / name)
        im.thumbnail((side, side))
        canvas = Image.new("RGBA", (side, side), (0, 0, 0, 0))  # square: never under 32 px
        canvas.paste(im, ((side - im.width) // 2, (side - im.height) // 2))
        canvas.save(folder / name)
    return folder


def runner(cluster: TokenCluster, args: list, home: Path | None = None,
           token: str | None = None, timeout: float = 240) -> Finished:
    """``python -m runner ARGS`` with a home folder of its own (``home``, default the
    cluster's token-less one) and no token in the environment unless ``token`` is given as
    ``$RAY_AUTH_TOKEN``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(home or cluster.home),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    if token is not None:
        env["RAY_AUTH_TOKEN"] = token
    proc = subprocess.run([sys.executable, "-m", "runner", *map(str, args)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env)
    return Finished(proc.returncode, parse_stdout(proc.stdout), proc.stdout, proc.stderr)


def _refused(r: Finished, out: Path, *words: str) -> None:
    assert r.returncode == 38, r.stderr[-3000:]
    assert r.kinds() == ["hello", "error"], r.kinds()
    err = r.last()
    assert err["kind"] == "cluster_auth" and err["details"]["address"] in err["message"], err
    for word in words:
        assert word in err["message"], (word, err["message"])
    assert "--cluster-token-file" in err["hint"] and "~/.ray/auth_token" in err["hint"]
    said = [ln for ln in r.stderr.splitlines() if ln.startswith("runner: cluster_auth: ")]
    assert len(said) == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert not out.exists()  # refused before any image or folder was touched


def test_a_batch_is_refused_without_the_token_and_with_a_wrong_one(cluster, tmp_path):
    src = _images(tmp_path / "in", TWO[:1])
    out = tmp_path / "out"
    base = ["batch", src, "-o", out, "--cluster", cluster.address]
    _refused(runner(cluster, base), out, "requires a token", "none was found",
             "$RAY_AUTH_TOKEN_PATH", "~/.ray/auth_token")
    wrong = tmp_path / "wrong.token"
    wrong.write_text(secrets.token_hex(32))
    _refused(runner(cluster, [*base, "--cluster-token-file", wrong]), out,
             f"refused the token from --cluster-token-file {wrong}")
    _refused(runner(cluster, base, token="not-the-token"), out,
             "refused the token from $RAY_AUTH_TOKEN")
    _refused(runner(cluster, [*base, "--cluster-token-file", tmp_path / "missing.token"]), out,
             "cannot be read", str(tmp_path / "missing.token"))
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    _refused(runner(cluster, [*base, "--cluster-token-file", empty]), out, "is empty")


def test_a_batch_runs_with_the_token_file(cluster, tmp_path):
    """The token given as --cluster-token-file (what the add-on's preference passes): both
    images are done on the cluster's nodes, and the batch says where its token came from."""
    src = _images(tmp_path / "in")
    out = tmp_path / "out"
    r = runner(cluster, ["batch", src, "-o", out, "--cluster", cluster.address,
                         "--cluster-token-file", cluster.token_file, "--texture-size", "512"])
    assert r.returncode == 0, r.stderr[-3000:]
    done = r.last()
    assert done["event"] == "batch_done" and (done["done"], done["failed"]) == (2, 0), done
    items = [e for e in r.events if e["event"] == "batch_item"]
    assert {e["status"] for e in items} == {"done"} and all(e["node"]["id"] for e in items)
    for name in TWO:
        assert (out / (Path(name).stem + ".glb")).stat().st_size > 0
    assert f"token from --cluster-token-file {cluster.token_file}" in r.stderr
    assert cluster.token_file.read_text().strip() not in r.stdout + r.stderr  # never shown


def test_check_says_the_cluster_requires_a_token_found_in_rays_default_file(cluster, tmp_path):
    """The token in Ray's own default place (``~/.ray/auth_token`` of the runner's home, what
    ``ray get-auth-token --generate`` writes), no option: check --cluster connects, lists both
    nodes and says the cluster requires a token and where the token came from; no warning."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    shutil.copy(cluster.token_file, home / ".ray" / "auth_token")
    r = runner(cluster, ["check", "--cluster", cluster.address], home=home)
    assert r.returncode == 0, r.stderr[-3000:]
    (ev,) = r.events
    auth = ev["cluster"]["auth"]
    assert auth == {"required": True,
                    "token_from": f"Ray's default token file {home / '.ray' / 'auth_token'}"}
    assert len(ev["cluster"]["nodes"]) == 2
    assert "runner: check: token authentication: required" in r.stderr
    assert "runner: warning:" not in r.stderr


def test_the_addon_passes_its_token_file_preference(cluster, tmp_path):
    """headless.py (the add-on's batch, its preference given as ``--cluster-token-file``, as
    Run Batch passes the Cluster token file preference): with the file the image is done on
    the cluster and imported; without it the batch is refused with the runner's cluster_auth
    status (38) and message."""
    folder = _images(tmp_path / "in", TWO[:1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(cluster.home),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    headless = [sys.executable, str(REPO / "blender_addon" / "headless.py"), str(folder),
                "--cluster", cluster.address, "--texture-size", "512"]
    refused = subprocess.run([*headless, "--glb", str(tmp_path / "refused")], env=env,
                             capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert refused.returncode == 38, refused.stderr[-3000:]
    assert "requires a token" in refused.stderr and "Traceback" not in refused.stderr
    assert not list((tmp_path / "refused").glob("*.glb"))
    out = tmp_path / "glbs"
    ok = subprocess.run([*headless, "--glb", str(out), "--cluster-token-file",
                         str(cluster.token_file)], env=env, capture_output=True, text=True,
                        timeout=240, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert [p.name for p in out.glob("*.glb")] == [Path(TWO[0]).stem + ".glb"]
    assert sum(" imported as " in ln for ln in ok.stderr.splitlines()) == 1, ok.stderr[-3000:]
