"""Working-memory tools (stageload.working_memory) against the unsliced module: same numbers
(bit for bit on this CPU, as the module docstring states), install/remove restores exactly,
one ``working_memory`` event each, a bad chunk size is a clear error."""
from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from stageload import (
    StageloadError,
    WorkingMemoryError,
    chunk_rows,
    on_call,
    query_chunk_for_budget,
    slice_attention,
)
from stageload.events import FIELDS


def _mlp(channels: int = 32) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(channels, 4 * channels), nn.SiLU(),
                         nn.Linear(4 * channels, channels))


def _same(got: torch.Tensor, expected: torch.Tensor, chunk: int) -> bool:
    """Bit-identical for chunks of 8 and more; below, the measured bound of the module
    docstring (another matrix-product kernel for 1–7 rows)."""
    if chunk >= 8:
        return torch.equal(got, expected)
    return bool((got - expected).abs().max() <= 1e-5 * expected.abs().max())


@pytest.mark.parametrize("rows", [3, 8, 64, 201])
@pytest.mark.parametrize("make", [lambda: nn.LayerNorm(32, eps=1e-6), _mlp],
                         ids=["layernorm", "mlp"])
@torch.no_grad()
def test_chunk_rows_matches_the_unchunked_module(make, rows):
    module = make()
    x = torch.randn(3, 67, 32)  # leading dims flattened: 201 rows
    expected = module(x)
    events = []
    with chunk_rows(module, rows, sink=events.append, stage="decode", target="decoder.mlp") as h:
        got = module(x)
        module(x)  # a second call sends no second event
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert _same(got, expected, rows)
    if isinstance(module, nn.LayerNorm):
        assert torch.equal(got, expected)  # no matrix product: every chunk size is exact
    assert [e["event"] for e in events] == ["working_memory"]
    event = events[0]
    assert set(FIELDS["working_memory"]) <= set(event)
    assert (event["stage"], event["target"], event["tool"], event["chunk"]) == \
        ("decode", "decoder.mlp", "chunk_rows", rows)
    assert h.calls == (2 if rows < 201 else 0)


@torch.no_grad()
def test_chunk_rows_estimates_the_hidden_rows_it_saves():
    module, events = _mlp(32), []
    chunk_rows(module, 100, sink=events.append)
    module(torch.randn(1000, 32))
    # hidden rows of the unchunked forward: Linear 128 + SiLU 128 fp32 per row, 900 rows fewer
    assert events[0]["bytes_saved"] == 900 * (128 + 128) * 4 and events[0]["note"] is None
    norm, events = nn.LayerNorm(32), []
    chunk_rows(norm, 100, sink=events.append)
    norm(torch.randn(1000, 32))
    assert events[0]["bytes_saved"] == 0 and "single layer" in events[0]["note"]


@torch.no_grad()
def test_chunk_rows_remove_restores_exactly_and_composes_with_on_call():
    module = _mlp(8)
    assert "forward" not in vars(module)
    seen = []
    outer_before = on_call(module, "forward", before=lambda x: seen.append(x.shape[0]))
    handle = chunk_rows(module, 8)
    outer_after = on_call(module, "forward", after=lambda out, x: seen.append(out.shape[0]))
    x = torch.randn(20, 8)
    assert torch.equal(module(x), nn.Sequential.forward(module, x))
    # a hook installed before (inside) sees each chunk, one installed after sees the call
    assert seen == [8, 8, 8, 20]
    handle.remove()
    handle.remove()  # twice is safe
    assert not handle.active
    assert torch.equal(module(x), nn.Sequential.forward(module, x))
    outer_after.remove()
    outer_before.remove()
    assert "forward" not in vars(module)


def test_chunk_rows_small_and_non_tensor_inputs_run_unchunked():
    events = []
    module = nn.LayerNorm(4)
    handle = chunk_rows(module, 8, sink=events.append)
    x = torch.randn(2, 3, 4)
    assert torch.equal(module(x), F.layer_norm(x, (4,), module.weight, module.bias))
    assert handle.calls == 0 and events[0]["bytes_saved"] == 0
    assert "fit in one chunk" in events[0]["note"]


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, None, "64"])
def test_bad_chunk_sizes_are_clear_errors(bad):
    with pytest.raises(WorkingMemoryError, match="whole number") as info:
        chunk_rows(nn.LayerNorm(4), bad)
    assert isinstance(info.value, StageloadError)
    with pytest.raises(WorkingMemoryError, match="queries"):
        slice_attention(types.SimpleNamespace(attn=F.scaled_dot_product_attention), "attn", bad)


def test_chunk_rows_refuses_a_module_that_is_not_per_row():
    class Pool(nn.Module):
        def forward(self, x):
            return x.mean(0, keepdim=True)

    module = Pool()
    chunk_rows(module, 4)
    with pytest.raises(WorkingMemoryError, match="per-row"):
        module(torch.randn(10, 3))


def _naive_attention(q, k, v):
    """matmul → softmax → matmul in fp32, the arithmetic of a 'naive' attention backend."""
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / q.shape[-1] ** 0.5)
    return torch.matmul(scores.softmax(dim=-1), v)


@pytest.mark.parametrize("queries", [3, 8, 17, 200])
@pytest.mark.parametrize("attr", ["naive", "sdpa"])
@torch.no_grad()
def test_slice_attention_matches_the_unsliced_function(attr, queries):
    owner = types.SimpleNamespace(naive=_naive_attention, sdpa=F.scaled_dot_product_attention)
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 4, 200, 32) for _ in range(3))
    expected = getattr(owner, attr)(q, k, v)
    events = []
    with slice_attention(owner, attr, queries, sink=events.append, stage=lambda: "texture",
                         target="flow.attention"):
        got = getattr(owner, attr)(q, k, v)
    assert _same(got, expected, queries)
    assert getattr(owner, attr) is (_naive_attention if attr == "naive"
                                    else F.scaled_dot_product_attention)
    assert vars(owner).keys() == {"naive", "sdpa"}
    (event,) = events
    assert (event["stage"], event["tool"], event["chunk"]) == ("texture", "slice_attention",
                                                              queries)
    # 4 heads × (200 − queries) × 200 keys × 4 bytes × 2 live copies
    assert event["bytes_saved"] == 4 * (200 - queries) * 200 * 4 * 2


@torch.no_grad()
def test_slice_attention_on_a_module_object_and_a_mask():
    """The owner may be a module object whose global name a call site reads; an attention
    mask spanning the queries is sliced with them."""
    module = types.ModuleType("fake_attention_module")
    module.scaled_dot_product_attention = F.scaled_dot_product_attention
    sys.modules[module.__name__] = module
    try:
        q, k, v = (torch.randn(2, 3, 50, 8) for _ in range(3))
        mask = torch.rand(2, 3, 50, 50) > 0.3
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        handle = slice_attention(module, "scaled_dot_product_attention", 16,
                                 baseline_queries=32)
        got = module.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        assert torch.equal(got, expected)
        assert torch.equal(module.scaled_dot_product_attention(q, k, v, mask), expected)
        with pytest.raises(WorkingMemoryError, match="is_causal"):
            module.scaled_dot_product_attention(q, k, v, is_causal=True)
        handle.remove()
        assert module.scaled_dot_product_attention is F.scaled_dot_product_attention
        assert handle.event["bytes_saved"] == 2 * 3 * (32 - 16) * 50 * 4 * 2
    finally:
        del sys.modules[module.__name__]


def test_query_chunk_for_budget_formula_and_errors():
    # 1 GiB over 12 heads × 21,500 keys × 4 bytes × 2 live copies = 520.2 → 512 in 64s
    assert query_chunk_for_budget(2 ** 30, heads=12, keys=21_500) == 520
    assert query_chunk_for_budget(2 ** 30, heads=12, keys=21_500, multiple=64) == 512
    chunk = query_chunk_for_budget(2 ** 30, heads=12, keys=21_500, multiple=64)
    assert 12 * chunk * 21_500 * 4 * 2 <= 2 ** 30
    assert query_chunk_for_budget(100, heads=1, keys=10, live_copies=1, multiple=64) == 2
    with pytest.raises(WorkingMemoryError, match="at least 2064000 bytes"):
        query_chunk_for_budget(1000, heads=12, keys=21_500)
    with pytest.raises(WorkingMemoryError, match="heads"):
        query_chunk_for_budget(2 ** 30, heads=0, keys=10)


def test_the_event_passes_the_add_on_checks():
    """The ``working_memory`` event a tool sends is what the add-on's reader accepts
    (blender_addon/runner_client/events.py), and a wrong field there is dropped with a note."""
    from blender_addon.runner_client.events import clean

    events = []
    module = nn.LayerNorm(4)
    chunk_rows(module, 2, sink=events.append)
    with torch.no_grad():
        module(torch.randn(9, 4))
    event = {"v": 1, **events[0]}
    assert clean(event) == (event, [])
    _, notes = clean({**event, "bytes_saved": -1, "chunk": "x"})
    assert len(notes) == 2


@torch.no_grad()
def test_slice_attention_sized_per_call_from_a_budget():
    """``queries`` as a callable: each call's slice from its own heads and keys."""
    owner = types.SimpleNamespace(attn=_naive_attention)
    q, k, v = (torch.randn(1, 3, 120, 16) for _ in range(3))
    expected = owner.attn(q, k, v)
    budget = 3 * 40 * 120 * 4 * 2  # scores of 40 queries
    sizes = []

    def size(q, k):
        sizes.append(query_chunk_for_budget(budget, heads=q.shape[1], keys=k.shape[-2]))
        return sizes[-1]

    with slice_attention(owner, "attn", size) as handle:
        assert torch.equal(owner.attn(q, k, v), expected)
    assert sizes == [40] and handle.chunk == 40 and handle.event["chunk"] == 40
    with slice_attention(owner, "attn", lambda q, k: 0):
        with pytest.raises(WorkingMemoryError, match="queries"):
            owner.attn(q, k, v)
