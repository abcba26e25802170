"""Method names (lopti.core.methods): one spelling for compare's variants and analyze's methods."""

import pytest

from lopti.core.methods import PAPER_METHODS, parse_method


def test_paper_methods_switch_ar_and_lopti_only():
    specs = {name: parse_method(name) for name in PAPER_METHODS}
    assert [(s.ar, s.lopti, s.token_credit) for s in specs.values()] == [
        (False, False, ()),
        (True, False, ()),
        (False, True, ()),
        (True, True, ()),
    ]


def test_presets_compose_with_ar_and_lopti():
    spec = parse_method("AR+Lopti+stapo")
    assert (spec.ar, spec.lopti, spec.token_credit, spec.token_credit_kwargs) == (True, True, ("stapo",), {})


def test_entropy_share_sets_rho():
    spec = parse_method("entropy20")
    assert spec.token_credit == ("high_entropy",)
    assert spec.token_credit_kwargs == {"high_entropy": {"rho": 0.2}}


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "empty part"),
        ("ar+", "empty part"),
        ("grpo+ar", "combines with nothing"),
        ("ar+ar", "ar listed twice"),
        ("stapp", "unknown part 'stapp'"),
        ("entropy0", "between 1 and 99"),
        ("clip_cov+kl_cov", "choose one"),
        ("ar+tr_grpo", "ar and tr_grpo"),
    ],
)
def test_bad_names_are_one_line(name, says):
    with pytest.raises(ValueError, match=says) as raised:
        parse_method(name)
    assert "\n" not in str(raised.value)
