"""The comparison rules."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recipe_audit.stats import RULES, RuleDecisions, apply_rules, count_failures, failure_mask


def bimodal(n_good=16, n_bad=4, good=0.85, bad=0.30):
    return np.array([good] * n_good + [bad] * n_bad, dtype=float)


def test_bimodal_mean_ships_card_does_not():
    x = bimodal()  # mean 0.74 sits in the empty valley between the modes
    r = apply_rules(x, 0.70, rng=0)
    assert isinstance(r, RuleDecisions)
    assert tuple(r.ships) == RULES == ("mean", "median", "bootstrap", "mean_minus_2sd", "card")
    assert r.mean == pytest.approx(0.74)
    assert r.median == pytest.approx(0.85)
    assert r.ships["mean"] and r.ships["median"]
    assert not r.ships["mean_minus_2sd"]
    assert r.two_sd_limit == pytest.approx(0.74 - 2 * np.std(x, ddof=1))
    assert not r.ships["card"]
    assert (r.k, r.n, r.sample_floor, r.card_verdict) == (4, 20, 22, "insufficient-evidence")


def test_bimodal_large_sample_card_still_refuses():
    x = bimodal(n_good=52, n_bad=7)  # 7/59 fail: mean, median ship, card does not
    r = apply_rules(x, 0.70, rng=1)
    assert r.ships["mean"] and r.ships["median"] and r.ships["bootstrap"]
    assert not r.ships["card"] and r.card_verdict == "unsupported"


def test_clean_sample_card_ships():
    x = np.linspace(0.80, 0.90, 30)
    r = apply_rules(x, 0.70, rng=2)
    assert all(r.ships.values())
    assert r.card_verdict == "release-supported" and r.upper <= 0.1


def test_ship_at_exact_tie():
    r = apply_rules([0.75, 0.75, 0.75], 0.75, rng=0)  # exactly representable: mean == tau
    assert r.ships["mean"] and r.ships["median"] and r.ships["bootstrap"] and r.ships["mean_minus_2sd"]
    assert r.k == 0  # a metric equal to tau does not fail


def test_bootstrap_reproducible_and_uses_given_generator():
    x = np.random.default_rng(3).normal(0.8, 0.05, 25)
    state = np.random.get_state()
    a = apply_rules(x, 0.75, rng=np.random.default_rng(11), B=500)
    b = apply_rules(x, 0.75, rng=np.random.default_rng(11), B=500)
    c = apply_rules(x, 0.75, rng=np.random.default_rng(12), B=500)
    assert a.bootstrap_limit == b.bootstrap_limit
    assert a.bootstrap_limit != c.bootstrap_limit
    assert np.random.get_state()[1].tolist() == state[1].tolist()  # global RNG untouched
    # one rng.integers draw of shape (B, n), then the 10th percentile of the resample means
    idx = np.random.default_rng(11).integers(0, x.size, size=(500, x.size))
    assert a.bootstrap_limit == pytest.approx(np.percentile(x[idx].mean(axis=1), 10), rel=1e-12)
    assert (a.B, a.bootstrap_percentile, a.seed) == (500, 10.0, None)
    seeded = apply_rules(x, 0.75, rng=11, B=500)
    assert seeded.bootstrap_limit == a.bootstrap_limit and seeded.seed == 11
    assert apply_rules(x, 0.75).seed == 0  # no rng: fixed default seed, never the global RNG


@pytest.mark.parametrize("n", [1, 2, 59, 1000, 4097])
@pytest.mark.parametrize("B", [1, 7, 300])
def test_bootstrap_in_blocks_is_the_single_draw_bit_for_bit(monkeypatch, n, B):
    """The resamples are drawn a block of rows at a time (bounded memory at 100,000 reruns); the
    means, the bootstrap limit and the generator's state afterwards are those of one
    ``integers(0, n, size=(B, n))`` draw, exactly."""
    from recipe_audit.stats import rules

    x = np.random.default_rng(n).normal(0.8, 0.05, n)
    monkeypatch.setattr(rules, "_BOOTSTRAP_CHUNK", 3 * n + 1)  # blocks of 3 rows, a ragged last one
    g_blocks, g_once = np.random.default_rng(7), np.random.default_rng(7)
    got = rules._bootstrap_means(x, B, g_blocks)
    want = x[g_once.integers(0, n, size=(B, n))].mean(axis=1)
    assert np.array_equal(got, want)
    assert g_blocks.integers(0, 2**62) == g_once.integers(0, 2**62)
    one = apply_rules(x, 0.75, rng=np.random.default_rng(7), B=B)
    assert one.bootstrap_limit == float(np.percentile(want, 10))


def test_lower_is_better_flips_every_comparison():
    rng = np.random.default_rng(5)
    for _ in range(20):
        loss = rng.normal(1.0, 0.3, rng.integers(3, 40))
        tau = float(rng.normal(1.1, 0.2))
        low = apply_rules(loss, tau, higher_is_better=False, rng=np.random.default_rng(1), B=300)
        high = apply_rules(-loss, -tau, higher_is_better=True, rng=np.random.default_rng(1), B=300)
        assert dict(low.ships) == dict(high.ships)
        assert low.k == high.k == int(np.sum(loss > tau))
        assert low.bootstrap_percentile == 90.0
        assert low.bootstrap_limit == pytest.approx(-high.bootstrap_limit, rel=1e-12, abs=1e-12)
        assert low.two_sd_limit == pytest.approx(np.mean(loss) + 2 * np.std(loss, ddof=1))


def test_lower_is_better_hand_case():
    loss = np.array([0.2, 0.25, 0.3, 0.9])
    r = apply_rules(loss, 0.5, higher_is_better=False, rng=0)
    assert r.ships["mean"] and r.ships["median"] and not r.ships["mean_minus_2sd"]
    assert r.k == 1


def test_count_failures_nan_inf():
    m = np.array([0.9, np.nan, np.inf, -np.inf, 0.5, 0.7])
    assert count_failures(m, 0.7) == 4  # 0.5, nan, inf, -inf
    assert count_failures(m, 0.7, higher_is_better=False) == 4  # 0.9, nan, inf, -inf
    np.testing.assert_array_equal(failure_mask(m, 0.7), [False, True, True, True, True, False])
    assert count_failures([], 0.5) == 0


def test_nan_reruns_ignored_by_practice_rules_and_failures_for_card():
    x = np.array([0.9] * 25 + [np.nan, np.inf])
    r = apply_rules(x, 0.8, rng=0)
    assert (r.n, r.k, r.n_finished, r.n_ignored) == (27, 2, 25, 2)
    assert r.mean == pytest.approx(0.9) and r.ships["mean"]
    assert not r.ships["card"]  # U(2, 27) > 0.1
    r2 = apply_rules(x[:25], 0.8, n_unfinished=2, rng=0)
    assert (r2.n, r2.k, r2.n_ignored) == (27, 2, 2)
    r3 = apply_rules(x[:25], 0.8, k=2, n=27, rng=0)
    assert (r3.n, r3.k, r3.n_ignored) == (27, 2, 2) and r3.ships == r2.ships


def test_too_few_finished_reruns():
    one = apply_rules([0.9, np.nan], 0.5, rng=0)
    assert one.ships["mean"] and not one.ships["mean_minus_2sd"]
    assert np.isnan(one.sd) and any("at least 2" in note for note in one.notes)
    none = apply_rules([np.nan, np.nan], 0.5, rng=0)
    assert not any(none.ships.values())
    assert none.n_finished == 0 and none.n_ignored == 2 and np.isnan(none.mean)


def test_to_dict_is_json():
    r = apply_rules([0.9, np.nan], 0.5, rng=0)
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert set(d["ships"]) == set(RULES)
    assert d["statistics"]["sd"] is None and d["n_ignored"] == 1
    assert d["bootstrap"]["B"] == 2000 and d["bootstrap"]["seed"] == 0
