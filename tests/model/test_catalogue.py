"""The model catalogue (fp4moe/data/models.json via ``fp4moe.model.catalogue``): the issue's numbers."""

from __future__ import annotations

import pytest

from fp4moe.model import catalogue

# From the issue (the models' config.json): hidden, moe_intermediate, routed experts, top-k, MoE layers
ISSUE_NUMBERS = {
    "dsv4-pro": ("DeepSeek-V4-Pro", 7168, 3072, 384, 6, 61),
    "dsv4-flash": ("DeepSeek-V4-Flash", 4096, 2048, 256, 6, 43),
}


@pytest.mark.parametrize("name", list(ISSUE_NUMBERS))
def test_model_numbers_match_the_issue(name):
    m = catalogue.get_model(name)
    assert (m.display_name, m.hidden, m.moe_intermediate, m.routed_experts, m.top_k, m.moe_layers) == ISSUE_NUMBERS[name]


def test_catalogue_rows_are_every_tp_with_each_dividing_ep():
    want = {(m, tp, ep) for m in ISSUE_NUMBERS for tp in (1, 2, 4, 8, 16) for ep in (1, 8) if tp % ep == 0}
    rows = catalogue.catalogue_rows()
    assert len(rows) == len(want) == 14
    assert {(pc.model.name, pc.tp, pc.ep) for pc in rows} == want


@pytest.mark.parametrize(
    "model,tp,ep,moe_tp,experts,i_p",
    [
        ("dsv4-pro", 8, 1, 8, 384, 384),
        ("dsv4-pro", 16, 1, 16, 384, 192),
        ("dsv4-pro", 8, 8, 1, 48, 3072),
        ("dsv4-flash", 16, 8, 2, 32, 1024),
        ("dsv4-flash", 16, 1, 16, 256, 128),
    ],
)
def test_parallel_config_per_rank_view(model, tp, ep, moe_tp, experts, i_p):
    pc = catalogue.parallel_config(model, tp, ep)
    assert (pc.moe_tp, pc.local_experts, pc.intermediate_per_partition) == (moe_tp, experts, i_p)
    assert pc.label == f"{model}-tp{tp}-ep{ep}"
    assert catalogue.parallel_config(catalogue.get_model(model), tp, ep) == pc  # spec or name


def test_unknown_model_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown model 'dsv4-max'; valid models: dsv4-flash, dsv4-pro"):
        catalogue.get_model("dsv4-max")
    with pytest.raises(ValueError, match="valid models"):
        catalogue.parallel_config("llama", 1)


@pytest.mark.parametrize(
    "model,tp,ep,pattern",
    [
        ("dsv4-pro", 5, 1, r"--tp 5 \(moe_tp 5\) does not divide dsv4-pro moe_intermediate 3072; valid moe_tp values \(<= 64\): \[1, 2, 3, 4, 6, 8,"),
        ("dsv4-pro", 64, 1, r"--tp 64: per-partition intermediate 48 of dsv4-pro is not a multiple of the MXFP4 block \(32\)"),
        ("dsv4-pro", 8, 3, r"--ep 3 must divide --tp 8"),
        ("dsv4-flash", 3, 3, r"--ep 3 does not divide dsv4-flash routed_experts 256; valid ep values: \[1, 2, 4, 8, 16, 32, 64, 128, 256\]"),
        ("dsv4-flash", 0, 1, r"--tp and --ep must be >= 1"),
        ("dsv4-flash", 8, 0, r"--tp and --ep must be >= 1"),
    ],
    ids=["tp-not-dividing", "tp-below-block", "ep-not-dividing-tp", "ep-not-dividing-experts", "tp0", "ep0"],
)
def test_bad_parallel_config_names_the_option_and_what_is_valid(model, tp, ep, pattern):
    with pytest.raises(ValueError, match=pattern):
        catalogue.parallel_config(model, tp, ep)
