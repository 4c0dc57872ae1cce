"""The cluster batch's decisions that need no cluster (runner/cluster/placement.py,
connect.parse_address): what a node's job is given of the command line, the task options, and
which nodes a given-back image avoids. Ray is not imported here."""
from __future__ import annotations

from pathlib import Path

import pytest

from runner.batch import build_parser
from runner.cli import guard_config
from runner.cluster.connect import NodeInfo, parse_address, require_room
from runner.cluster.placement import avoidable, node_argv, record_raw, task_options
from runner.errors import RunnerError


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
    """tester2 finding 7: the hint said ``"image_to_mesh": 0`` for the head, so a 1-machine
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
    head = re.search(r"`ray start --head [^`]*`", hint).group(0)
    assert """'{"image_to_mesh": 1}'""" in head, hint
    docs = (Path(__file__).parents[2] / "docs" / "cluster.md").read_text()
    assert head.strip("`") in docs  # the same command as docs/cluster.md step 2
