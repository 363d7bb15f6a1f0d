"""kvevict.LayerLayout: the library's rule for models with sliding-window layers (kvevict::LayerLayout, plan_layers)
from Python: which layers are global, the budgets over the global layers only, and every refusal by name."""
import pytest

import kvevict

GEMMA3_TYPES = (["sliding_attention"] * 5 + ["full_attention"]) * 3  # Gemma 3 270M's config.layer_types


def test_gemma3_layout_from_transformers_layer_types_and_from_the_period():
    a = kvevict.LayerLayout.from_layer_types(GEMMA3_TYPES, window=512)
    b = kvevict.LayerLayout.periodic(18, 6, 512)
    for layout in (a, b):
        assert len(layout) == 18
        assert layout.n_global == 3
        assert layout.global_layers == [5, 11, 17]
        assert layout.window == 512
        assert layout.kinds == (["sliding"] * 5 + ["global"]) * 3
        assert [layout.is_global(l) for l in (0, 4, 5, 17)] == [False, False, True, True]
        assert repr(layout) == "kvevict.LayerLayout(18 layers, global [5,11,17], window 512)"
    assert kvevict.LayerLayout.periodic(4, 2, 8, global_first=True).global_layers == [0, 2]


def test_options_are_keyword_only():
    with pytest.raises(TypeError):
        kvevict.LayerLayout(["global", "sliding"], 8)
    with pytest.raises(TypeError):
        kvevict.LayerLayout(["global"]).plan(4, 0)


def test_a_model_without_sliding_layers_keeps_no_window():
    layout = kvevict.LayerLayout(["global"] * 3, window=64)
    assert layout.window == 0 and layout.global_layers == [0, 1, 2]
    assert kvevict.LayerLayout.from_layer_types(["full_attention"] * 2).global_layers == [0, 1]


def test_plan_gives_each_global_layer_its_budget_and_sliding_layers_none():
    layout = kvevict.LayerLayout.periodic(18, 6, 512)
    assert layout.plan(100) == [0] * 5 + [100] + [0] * 5 + [100] + [0] * 5 + [100]
    # layer_budgets(pyramid, 5 layers, k = 100) = [195, 148, 100, 52, 5] (tests/layer_budgets_test.cpp), spread over
    # the 5 global layers of a 10-layer model whose odd layers are global.
    assert kvevict.LayerLayout.periodic(10, 2, 512).plan(100, layer_budgets="pyramid") == [0, 195, 0, 148, 0, 100, 0,
                                                                                             52, 0, 5]
    assert kvevict.LayerLayout(["sliding", "global", "global"], window=16).plan(10, layer_budgets="1,3") == [0, 5, 15]


@pytest.mark.parametrize("call, message", [
    (lambda: kvevict.LayerLayout([]), "kvevict.LayerLayout: kinds is empty (a model has at least one layer)"),
    (lambda: kvevict.LayerLayout(["global", "local"], window=8),
     "kvevict.LayerLayout: kinds[1] = 'local': expected 'global' or 'sliding'"),
    (lambda: kvevict.LayerLayout(["global", "sliding"]),
     "kvevict.LayerLayout: window must be >= 1 when layers slide (got 0; 1 of 2 layers slide)"),
    (lambda: kvevict.LayerLayout.from_layer_types(["full_attention", "chunked_attention"], window=8),
     "kvevict.LayerLayout.from_layer_types: layer_types[1] = 'chunked_attention': expected 'full_attention' or "
     "'sliding_attention'"),
    (lambda: kvevict.LayerLayout.periodic(0, 6, 512), "kvevict::LayerLayout::periodic: n_layers must be >= 1 (got 0)"),
    (lambda: kvevict.LayerLayout.periodic(6, 0, 512), "kvevict::LayerLayout::periodic: period must be >= 1 (got 0)"),
    (lambda: kvevict.LayerLayout.periodic(6, 3, 0),
     "kvevict::LayerLayout::periodic: window must be >= 1 when layers slide (got 0)"),
    (lambda: kvevict.LayerLayout.periodic(6, 3, 8).is_global(6),
     "kvevict::LayerLayout::is_global: layer 6 of a model of 6 layers"),
    (lambda: kvevict.LayerLayout(["sliding"], window=8).plan(4),
     "kvevict::plan_layers: every one of the 1 layers slides (window 8): there is no global layer to evict in"),
    (lambda: kvevict.LayerLayout(["global"]).plan(0), "kvevict.LayerLayout.plan: k must be >= 1 (got 0)"),
    (lambda: kvevict.LayerLayout(["global"]).plan(4, layer_budgets="steep"), "kvevict::parse_layer_budgets"),
])
def test_bad_arguments_are_refused_by_name(call, message):
    with pytest.raises(ValueError) as e:
        call()
    assert message in str(e.value)
