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


def test_controls_keep_loptis_schedule_and_change_its_split():
    specs = {name: parse_method(name) for name in ("grpo2", "lopti_random", "ar+lopti_random", "AR+GRPO2+stapo")}
    assert [(s.ar, s.lopti, s.lopti_split, s.token_credit) for s in specs.values()] == [
        (False, True, "none", ()),
        (False, True, "random", ()),
        (True, True, "random", ()),
        (True, True, "none", ("stapo",)),
    ]
    assert [parse_method(name).lopti_split for name in PAPER_METHODS] == ["probability"] * 4


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
        ("grpo3", "unknown part 'grpo3'; a method is one of grpo, grpo2, ar, lopti, lopti_random,"),
        ("lopti+grpo2", "lopti and grpo2 each choose the tokens of the two passes; keep one"),
        ("ar+lopti_random+lopti", "lopti_random and lopti each choose"),
        ("grpo+grpo2", "combines with nothing"),
    ],
)
def test_bad_names_are_one_line(name, says):
    with pytest.raises(ValueError, match=says) as raised:
        parse_method(name)
    assert "\n" not in str(raised.value)
