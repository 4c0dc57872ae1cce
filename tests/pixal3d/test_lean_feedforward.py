"""The lean flow feed-forward (``stageload.pixal3d.lean.feedforward``) on the stand-in port's
real-architecture flow classes at small widths: a whole forward of the texture and structure
flows with the tool installed equals the port's bit for bit in bf16 (the released flows'
dtype), within fp32 rounding in fp32; the range respects the budget; a broken range loop
(the last partial range dropped) is caught by the same comparison; a net lean does not know
and a port without the classes are said, never silent; ``remove()`` restores the classes."""
from __future__ import annotations

import importlib
import sys

import pytest
import torch

from stageload.errors import WorkingMemoryError
from stageload.pixal3d.lean import feedforward as ff

HIDDEN = 170  # int(32 × 5.3334): the small flows' MLP width
TOKENS = 1000


@pytest.fixture(scope="module")
def port(standin_dir):
    added = str(standin_dir) not in sys.path
    if added:
        sys.path.insert(0, str(standin_dir))
    yield importlib.import_module
    if added:
        sys.path.remove(str(standin_dir))


def _flow(port, name: str, dtype: str):
    configs = port("flow_configs")
    return configs.build_flow(name, dict(configs.small_args(name), dtype=dtype), seed=3)


def _texture_inputs(port, tokens: int = TOKENS):
    sparse = port("pixal3d.modules.sparse")
    gen = torch.Generator().manual_seed(0)
    cells = torch.randperm(64 ** 3, generator=gen)[:tokens].sort().values
    xyz = torch.stack([cells // 4096, cells // 64 % 64, cells % 64], 1)
    coords = torch.cat([torch.zeros(tokens, 1, dtype=torch.long), xyz], 1).int()

    def tensor(channels):
        return sparse.SparseTensor(torch.randn(tokens, channels, generator=gen), coords)

    cond = {"global": torch.randn(1, 5, 16, generator=gen), "proj": tensor(32)}
    return (tensor(8), torch.tensor([500.0]), cond), {"concat_cond": tensor(8)}


def _budget_for(rows: int, hidden: int = HIDDEN, element: int = 2) -> int:
    return rows * hidden * element * ff.LIVE_COPIES


@torch.no_grad()
def _lean_and_port(net, args, kwargs, budget):
    port_out = net(*args, **kwargs)
    events = []
    tool = ff.lean_feedforward(budget, sink=events.append)
    try:
        lean_out = net(*args, **kwargs)
    finally:
        tool.remove()
    return port_out, lean_out, events, tool


def _feats(out):
    return out.feats if hasattr(out, "feats") else out


def test_texture_flow_bf16_is_the_ports_bit_for_bit_in_budgeted_ranges(port):
    blocks = port("pixal3d.modules.sparse.transformer.blocks")
    original = vars(blocks.SparseFeedForwardNet)["forward"]
    net = _flow(port, "tex_slat_flow_model_1024", "bfloat16")
    args, kwargs = _texture_inputs(port)
    budget = _budget_for(300)  # 300 tokens' hidden rows: ranges of 256 (64s), tail 232
    port_out, lean_out, events, tool = _lean_and_port(net, args, kwargs, budget)
    assert torch.equal(_feats(lean_out), _feats(port_out))
    assert vars(blocks.SparseFeedForwardNet)["forward"] is original  # removed exactly
    (event,) = [e for e in events if e["target"].endswith(":SparseFeedForwardNet")]
    rows = event["chunk"]
    assert rows == 256 and rows * HIDDEN * 2 * ff.LIVE_COPIES <= budget
    assert event["bytes_saved"] == (TOKENS - rows) * HIDDEN * 2 * ff.LIVE_COPIES
    assert blocks.SparseFeedForwardNet in tool.classes


def test_structure_flow_bf16_dense_feedforward_is_the_ports_bit_for_bit(port):
    net = _flow(port, "sparse_structure_flow_model", "bfloat16")
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 8, 16, 16, 16, generator=gen)  # batch 2: both halves of a CFG step
    cond = {"global": torch.randn(2, 5, 16, generator=gen),
            "proj": torch.randn(2, 4096, 16, generator=gen)}
    hidden = net.blocks[0].mlp.mlp[0].out_features
    budget = _budget_for(1000, hidden)
    port_out, lean_out, events, _ = _lean_and_port(net, (x, torch.tensor([500.0, 500.0]),
                                                         cond), {}, budget)
    assert torch.equal(lean_out, port_out)
    (event,) = [e for e in events if e["target"].endswith(":FeedForwardNet")]
    assert event["chunk"] == 960 and event["bytes_saved"] > 0  # 8,192 rows in ranges of 960


def test_texture_flow_fp32_within_rounding(port):
    net = _flow(port, "tex_slat_flow_model_1024", "float32")
    args, kwargs = _texture_inputs(port)
    port_out, lean_out, events, _ = _lean_and_port(net, args, kwargs, _budget_for(300, element=4))
    port_feats, lean_feats = _feats(port_out), _feats(lean_out)
    assert events[0]["chunk"] == 256
    # another row count may take another fp32 kernel: allowed 1e-6 relative (0 measured here)
    assert (lean_feats - port_feats).abs().max() <= 1e-6 * port_feats.abs().max()


def test_a_dropped_last_range_is_caught(port, monkeypatch):
    """The control: the comparison above fails for a loop that drops the last partial range."""
    net = _flow(port, "tex_slat_flow_model_1024", "bfloat16")
    args, kwargs = _texture_inputs(port)
    real = ff.feedforward_rows

    def broken(layers, feats, rows):
        whole = feats.shape[0] // rows * rows
        out = torch.zeros(feats.shape[0], layers[2].out_features, dtype=feats.dtype)
        out[:whole] = real(layers, feats[:whole], rows)
        return out

    monkeypatch.setattr(ff, "feedforward_rows", broken)
    port_out, lean_out, _, _ = _lean_and_port(net, args, kwargs, _budget_for(300))
    assert not torch.equal(_feats(lean_out), _feats(port_out))


def test_rows_from_the_budget():
    assert ff.rows_for_budget(1 << 30, 8192, 2) == 2048  # capped at 64 MiB
    assert ff.rows_for_budget(2 << 20, 8192, 2) == 64
    assert ff.rows_for_budget(_budget_for(300), HIDDEN, 2) == 256
    assert ff.rows_for_budget(_budget_for(30), HIDDEN, 2) == 30  # under one multiple of 64
    with pytest.raises(WorkingMemoryError, match="not one token"):
        ff.rows_for_budget(100, 8192, 2)
    with pytest.raises(WorkingMemoryError, match="budget_bytes"):
        ff.rows_for_budget(0, 8192, 2)


def test_fitting_input_unknown_net_and_missing_class_are_said(port, monkeypatch):
    blocks = port("pixal3d.modules.sparse.transformer.blocks")
    torch.manual_seed(0)
    net = blocks.SparseFeedForwardNet(16, 2.0).eval()
    odd = blocks.SparseFeedForwardNet(16, 2.0).eval()
    odd.mlp[1] = port("pixal3d.modules.sparse.nonlinearity").SparseGELU()  # exact GELU: fine
    odd.mlp.append(torch.nn.Identity())  # a fourth layer lean does not know
    x = _texture_inputs(port, 200)[0][0].replace(torch.randn(200, 16))
    monkeypatch.setattr(ff, "CLASSES", ff.CLASSES + (("pixal3d.no_such", "FeedForwardNet"),))
    events = []
    with torch.no_grad():
        want_net, want_odd = net(x).feats, odd(x).feats
        tool = ff.lean_feedforward(1 << 30, sink=events.append)
        try:
            assert torch.equal(net(x).feats, want_net) and torch.equal(odd(x).feats, want_odd)
        finally:
            tool.remove()
    missing, fits, warning = events
    assert missing["bytes_saved"] == 0 and "no pixal3d.no_such.FeedForwardNet" in missing["note"]
    assert fits["bytes_saved"] == 0 and fits["note"].startswith("200 tokens fit one range")
    assert warning["event"] == "warning" and warning["fallback"] == "port_feedforward"
