"""The cluster batch's decisions that need no cluster (runner/cluster/placement.py,
connect.parse_address, auth): what a node's job is given of the command line, the task options,
which nodes a given-back image avoids, and where the cluster's token is looked for. Ray is not
imported here."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from meshfacts.errors import RunnerError
from runner.cluster.batch import ClusterBatch
from runner.cluster.connect import NodeInfo, parse_address, require_room
from runner.cluster.placement import (
    Exclusions,
    avoidable,
    next_avoid,
    node_argv,
    record_raw,
    task_options,
)
from runner.cluster.remote import RemoteJob
from runner.commands.batch import build_parser
from runner.commands.cli import guard_config


def _argv(args: list[str]) -> list[str]:
    parser = build_parser()
    raw = record_raw(parser)
    ns = parser.parse_args(args)
    return node_argv(parser, ns, raw, guard_config(ns).need)


def test_the_node_gets_the_job_and_guard_options_as_typed_and_nothing_of_the_head(tmp_path):
    argv = _argv(["in", "-o", "out", "--cluster", "h:6379", "--overwrite", "--seed", "7",
                  "--texture-size", "512", "--need", "1G", "--busy", "ffmpeg",
                  "--busy=-x", "--start-timeout", "30", "--cancel-on-stdin-eof"])
    assert argv == ["--seed=7", "--texture-size=512", "--need=1G", "--busy=ffmpeg",
                    "--busy=-x", "--start-timeout=30"]
    assert _argv(["in", "-o", "out", "--cluster", "auto"]) == []  # defaults stay the node's


def test_need_from_is_read_here_and_sent_as_bytes(tmp_path):
    trace = tmp_path / "old.trace.jsonl"
    trace.write_text('{"event": "sample", "t": 1.0, "pid": 1, "footprint": 123456789, '
                     '"hwm": null, "available": null, "total": null, "swap": 0, '
                     '"pressure": null}\n')
    argv = _argv(["in", "-o", "out", "--cluster", "auto", "--need-from", str(trace)])
    assert argv == ["--need=123456789"]


def test_task_options_ask_for_a_slot_memory_and_no_ray_retries():
    opts = task_options(2 << 30)
    assert opts["resources"] == {"image_to_mesh": 1} and opts["memory"] == 2 << 30
    assert (opts["num_cpus"], opts["max_retries"], opts["retry_exceptions"]) == (0, 0, False)
    assert "memory" not in task_options(None) and "label_selector" not in task_options(None)
    assert task_options(None, {"b", "a"})["label_selector"] == {"ray.io/node-id": "!in(a,b)"}


def _node(name: str, memory: int, slots: int = 1) -> NodeInfo:
    return NodeInfo(id=name, host=name, ip="10.0.0.1", memory=memory, slots=slots, cpus=1)


def test_a_refusing_node_is_avoided_only_while_another_can_take_the_image():
    nodes = [_node("a", 4 << 30), _node("b", 4 << 30), _node("small", 1 << 30),
             _node("head", 8 << 30, slots=0)]
    assert avoidable(nodes, {"a"}, 2 << 30) == {"a"}
    assert avoidable(nodes, {"a", "b"}, 2 << 30) == set()  # only "small": too little memory
    assert avoidable(nodes, {"a", "b"}, None) == {"a", "b"}


def test_a_token_file_needs_a_cluster():
    """--cluster-token-file without --cluster is refused (a token for no cluster), for a batch
    and for check; a node's job never gets it."""
    from runner.cluster.auth import require_cluster_for_token

    ns = build_parser().parse_args(["in", "-o", "out", "--cluster-token-file", "t"])
    with pytest.raises(RunnerError) as err:
        require_cluster_for_token(ns)
    assert err.value.kind == "usage" and "--cluster" in err.value.hint
    assert _argv(["in", "-o", "out", "--cluster", "h:6379", "--cluster-token-file", "t",
                  "--seed", "1"]) == ["--seed=1"]


def test_addresses_and_room():
    assert parse_address("auto") is None
    assert parse_address("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert parse_address("ray://head.local:10001") == ("head.local", 10001)
    for bad in ("head", "head:", ":6379", "head:99999", "head:x"):
        with pytest.raises(RunnerError) as err:
            parse_address(bad)
        assert err.value.kind == "usage"
    with pytest.raises(RunnerError) as err:
        require_room([_node("head", 8 << 30, slots=0)], "h:6379", None)
    assert err.value.kind == "cluster_unavailable" and "image_to_mesh" in err.value.message
    with pytest.raises(RunnerError) as err:
        require_room([_node("a", 1 << 30)], "h:6379", 2 << 30)
    assert err.value.kind == "cluster_unavailable" and "--need" in err.value.message
    require_room([_node("a", 4 << 30)], "h:6379", 2 << 30)


def test_the_unavailable_hint_starts_the_head_with_a_slot_as_the_docs_do():
    """The hint said ``"image_to_mesh": 0`` for the head, so a 1-machine
    user following it got a cluster with no slot. Nothing listens on the port asked here."""
    import re
    import socket

    from runner.cluster.connect import check_port

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RunnerError) as info:
        check_port(f"127.0.0.1:{port}", "127.0.0.1", port)
    hint = info.value.hint
    head = re.search(r"`RAY_AUTH_MODE=token ray start --head [^`]*`", hint).group(0)
    assert """'{"image_to_mesh": 1}'""" in head, hint
    node = re.search(r"`RAY_AUTH_MODE=token ray start --address=[^`]*`", hint).group(0)
    docs = (Path(__file__).parents[2] / "docs" / "cluster.md").read_text()
    assert head.strip("`") in docs  # the same command as docs/cluster.md step 2
    assert node.strip("`").replace("HEAD:", "HEAD-IP:") in docs  # and step 3


class _Batch:
    """What ``RemoteJob.place`` reads of a ``ClusterBatch``, with the real ``exclude`` and
    ``Exclusions``; the events it emits are kept in ``events``."""

    exclude = ClusterBatch.exclude

    def __init__(self, nodes, need=None):
        import io

        from runner.protocol import Emitter

        self.nodes, self.need, self.cancel = nodes, need, None
        self.exclusions = Exclusions()
        self.out = io.BytesIO()
        self.emitter = Emitter(self.out)

    def refresh_nodes(self):
        pass

    @property
    def events(self):
        import json

        return [json.loads(line) for line in self.out.getvalue().splitlines()]


class _Job(RemoteJob):
    """``RemoteJob`` whose ``attempt`` is a recorded outcome per node instead of a Ray task:
    the task goes to the first node (Ray's order) that ``avoid`` does not keep it off, as
    Ray's label selector would, and ends with that node's recorded final event."""

    def __init__(self, batch, outcomes: dict[str, dict]):
        super().__init__(batch, job=None, index=1)
        self.outcomes, self.tried = outcomes, []

    def attempt(self, data, avoid):
        node = next(n for n in self.batch.nodes if n.id not in avoid and n.slots >= 1)
        self.tried.append(node.id)
        self.node, self.final = node.label(), self.outcomes[node.id]
        return {"node": node.label(), "exit_code": self.final.get("exit_code", 0)}


def _nodes(*ids):
    return [NodeInfo(id=i, host=f"host-{i}", ip="10.0.0.1", memory=4 << 30, slots=1, cpus=1)
            for i in ids]


MISSING = {"event": "error", "kind": "weights_missing", "exit_code": 36,
           "message": "The Pixal3D weights are not there: expected at /x"}
DONE = {"event": "result", "exit_code": 0}


def test_a_node_without_weights_gives_the_image_back_and_is_left_out(tmp_path):
    """Node a lacks the weights → the image runs again on b (done), the
    retry names a; a is excluded for the batch (one warning naming its host), so the next
    image goes straight to b."""
    batch = _Batch(_nodes("a", "b"))
    job = _Job(batch, {"a": MISSING, "b": DONE})
    end = job.place(b"")
    assert end["exit_code"] == 0 and job.tried == ["a", "b"]
    assert job.retries == [{"node": {"id": "a", "host": "host-a"},
                            "reason": "weights_missing: " + MISSING["message"]}]
    (warning,) = [e for e in batch.events if e["event"] == "warning"]
    assert "host-a" in warning["message"] and warning["node"]["id"] == "a"
    assert warning["kind"] == "weights_missing"
    second = _Job(batch, {"a": MISSING, "b": DONE})
    assert second.place(b"")["exit_code"] == 0 and second.tried == ["b"]
    assert len([e for e in batch.events if e["event"] == "warning"]) == 1


def test_when_no_node_can_run_it_the_image_fails_with_the_node_kind_naming_the_nodes():
    batch = _Batch(_nodes("a", "b"))
    pixal = {"event": "error", "kind": "pixal3d_missing", "exit_code": 32,
             "message": "No Pixal3D checkout at /p"}
    job = _Job(batch, {"a": MISSING, "b": pixal})
    with pytest.raises(RunnerError) as info:
        job.place(b"")
    assert job.tried == ["a", "b"]  # each node once, then no more attempts
    assert info.value.kind == "pixal3d_missing"
    assert "node host-a: weights_missing" in info.value.message
    assert "node host-b: pixal3d_missing" in info.value.message
    later = _Job(batch, {"a": MISSING, "b": pixal})
    with pytest.raises(RunnerError):
        later.place(b"")
    assert later.tried == []  # the batch already knows: not placed at all


def test_next_avoid_keeps_excluded_nodes_off_and_says_when_none_is_left():
    nodes = _nodes("a", "b")
    assert next_avoid(nodes, set(), {"a"}, None) == {"a"}
    assert next_avoid(nodes, {"b"}, {"a"}, None) == {"a"}  # b refused but is the only one left
    assert next_avoid(nodes, set(), {"a", "b"}, None) is None
    assert next_avoid(nodes, set(), set(), None) == set()


def test_the_token_is_found_where_ray_looks_and_the_option_wins(tmp_path, monkeypatch):
    """Ray's order ($RAY_AUTH_TOKEN, the file $RAY_AUTH_TOKEN_PATH names, ~/.ray/auth_token),
    each named as the source; an unreadable or empty $RAY_AUTH_TOKEN_PATH is cluster_auth
    (Ray refuses it too); --cluster-token-file wins over the environment's token and makes
    Ray read that file; a token found for an address that cannot be asked first (auto) turns
    token mode on for this process. The environment is this test's (monkeypatch)."""
    from runner.cluster import auth

    for name in (auth.TOKEN_ENV, auth.TOKEN_PATH_ENV, auth.MODE_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert auth.find_token("a") is None
    (tmp_path / "home" / ".ray").mkdir(parents=True)
    (tmp_path / "home" / ".ray" / "auth_token").write_text("from-home\n")
    found = auth.find_token("a")
    assert found.value == "from-home" and "Ray's default token file" in found.source
    named = tmp_path / "named"
    named.write_text("from-path")
    monkeypatch.setenv(auth.TOKEN_PATH_ENV, str(named))
    assert auth.find_token("a") == auth.Token("from-path", f"the file {named} named by "
                                                           "$RAY_AUTH_TOKEN_PATH")
    monkeypatch.setenv(auth.TOKEN_ENV, "from-env")
    assert auth.find_token("a") == auth.Token("from-env", "$RAY_AUTH_TOKEN")
    monkeypatch.delenv(auth.TOKEN_ENV)
    named.write_text("  \n")
    with pytest.raises(RunnerError) as err:
        auth.find_token("h:1")
    assert err.value.kind == "cluster_auth" and "is empty" in err.value.message
    named.unlink()
    with pytest.raises(RunnerError) as err:
        auth.find_token("h:1")
    assert err.value.kind == "cluster_auth" and "cannot be read" in err.value.message
    option = tmp_path / "option.token"
    option.write_text("from-option\n")
    monkeypatch.setenv(auth.TOKEN_ENV, "from-env")
    got = auth.prepare("auto", None, str(option))
    assert got == auth.Auth(None, f"--cluster-token-file {option}")
    assert os.environ[auth.TOKEN_PATH_ENV] == str(option) and auth.TOKEN_ENV not in os.environ
    assert os.environ[auth.MODE_ENV] == "token"
