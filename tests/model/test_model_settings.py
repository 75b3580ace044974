"""The models' routing and activation settings (fp4moe/data/models.json ``routing``/``activation``):
each with the config.json field it is read from and its source; unknown marked, never guessed;
a malformed setting is an error naming the model and the setting."""

from __future__ import annotations

import json

import pytest
import torch

from fp4moe.model import catalogue
from fp4moe.model.catalogue import ScoreMode
from fp4moe.reference import routing


@pytest.mark.parametrize("name", ["dsv4-pro", "dsv4-flash"])
def test_deepseek_v4_settings_are_data_with_sources(name):
    st = catalogue.get_model(name).settings
    assert st.score_mode is ScoreMode.SQRTSOFTPLUS
    assert st.value("renormalize") is True and st.value("routed_scaling_factor") == 1.5
    assert st.value("correction_bias") is True and st.value("grouped_topk") is False
    assert st.value("hidden_act") == "silu" and st.value("swiglu_limit") == 10.0
    for group in (st.routing, st.activation):
        for s in group.values():
            assert s.field and ((s.value is None) == bool(s.unknown)) and ((s.value is None) != bool(s.source))
    assert st.routing["hash_layers"].value is None and "no source" in st.routing["hash_layers"].unknown


def _broken(tmp_path, monkeypatch, mutate):
    doc = json.loads(catalogue.CATALOGUE_FILE.read_text())
    mutate(doc["models"]["dsv4-pro"])
    p = tmp_path / "models.json"
    p.write_text(json.dumps(doc))
    monkeypatch.setattr(catalogue, "CATALOGUE_FILE", p)
    catalogue.load_catalogue.cache_clear()
    try:
        with pytest.raises(ValueError) as e:
            catalogue.load_catalogue()
    finally:
        catalogue.load_catalogue.cache_clear()
    return str(e.value)


@pytest.mark.parametrize("mutate, says", [
    (lambda m: m["routing"]["scoring_func"].pop("source"), "routing.scoring_func: a value must name its source"),
    (lambda m: m["routing"]["scoring_func"].__setitem__("value", "softplus"), "is not one of"),
    (lambda m: m["routing"]["hash_layers"].pop("unknown"), "an unknown value (null) must say why"),
    (lambda m: m["activation"]["swiglu_limit"].__setitem__("value", -1), "must be > 0"),
    (lambda m: m["activation"]["swiglu_limit"].__setitem__("value", True), "is not a float"),
    (lambda m: m["routing"].pop("renormalize"), "routing must hold exactly"),
    (lambda m: m.pop("activation"), "activation must hold exactly"),
])
def test_a_malformed_setting_names_the_model_and_the_setting(tmp_path, monkeypatch, mutate, says):
    msg = _broken(tmp_path, monkeypatch, mutate)
    assert "dsv4-pro" in msg and says in msg, msg


def test_the_reference_router_scores_renormalises_scales_and_accepts_any_tie_break():
    logits = torch.tensor([[2.0, -1.0, 0.5, 0.5, -3.0]])
    w, ids = routing.reference_topk(logits, 3, ScoreMode.SQRTSOFTPLUS, renormalize=True, scaling=1.5)
    assert ids.tolist() == [[0, 2, 3]] and abs(float(w.sum()) - 1.5) < 1e-12
    s = torch.nn.functional.softplus(logits.double()).sqrt()
    assert torch.allclose(w, s[:, [0, 2, 3]] / s[:, [0, 2, 3]].sum() * 1.5)
    keys = routing.selection_keys(logits, ScoreMode.SQRTSOFTPLUS)
    tie = torch.tensor([[2.0, 0.5, 0.5, -1.0, -2.0]])  # a tie at the boundary of a top-2
    assert routing.valid_topk(tie, torch.tensor([[0, 1]])).item() and routing.valid_topk(tie, torch.tensor([[0, 2]])).item()
    assert not routing.valid_topk(tie, torch.tensor([[1, 2]])).item()  # the top one left out
    assert not routing.valid_topk(keys, torch.tensor([[0, 0, 2]])).item()  # not distinct
    assert not routing.valid_topk(keys, torch.tensor([[0, 2, 9]])).item()  # out of range
    bias = torch.tensor([0.0, 0.0, -5.0, 0.0, 0.0])  # selection on score + bias, weights unbiased
    w, ids = routing.reference_topk(logits, 2, ScoreMode.SQRTSOFTPLUS, renormalize=False, scaling=1.0, bias=bias)
    assert ids.tolist() == [[0, 3]] and torch.allclose(w, s[:, [0, 3]])
    wd, idd = routing.reference_topk(logits, 2, ScoreMode.SOFTMAX, renormalize=True)
    assert idd.tolist() == [[0, 2]] and torch.allclose(wd, torch.softmax(logits.double()[:, [0, 2]], -1))


def test_the_sglang_tier_writes_the_catalogues_settings_into_its_config_json():
    """The SGLang tier judges SGLang's fused_moe call against the config.json it writes
    (targets/sglang/target.py model_config): those values are the catalogue's."""
    from fp4moe.targets.sglang import target

    for name in ("dsv4-pro", "dsv4-flash"):
        st = catalogue.get_model(name).settings
        assert target.DSV4_SWIGLU_LIMIT == st.value("swiglu_limit")
        assert target.ROUTED_SCALING == st.value("routed_scaling_factor")
