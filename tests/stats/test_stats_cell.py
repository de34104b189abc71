"""stats.cell: a card's statistics of one cell, computed once, are those of each statistic at each bar."""

from __future__ import annotations

import numpy as np
import pytest

from recipe_audit.stats import apply_rules, band_bounds, tail_bound
from recipe_audit.stats.cell import cell_statistics
from recipe_audit.stats.rules import practice_statistics


@pytest.mark.parametrize("hib, extra, method", [(True, 0, "auto"), (False, 3, "dkw"), (True, 2, "exact-ks")])
def test_one_call_gives_each_bars_numbers(hib, extra, method):
    rng = np.random.default_rng(7)
    vals = np.r_[rng.uniform(0.6, 1.0, 40), [np.nan, np.inf]]
    taus = (0.65, 0.8, 0.95)
    cs = cell_statistics(vals, taus, eps=0.1, delta=0.05, higher_is_better=hib, B=300, rng=np.random.default_rng(3),
                         band_method=method, n_extra_failures=extra)
    for i, tau in enumerate(taus):
        alone = apply_rules(vals, tau, eps=0.1, delta=0.05, higher_is_better=hib, B=300, rng=np.random.default_rng(3))
        bound = tail_bound(alone.k, vals.size, 0.1, 0.05)
        band = band_bounds(vals, [tau], eps=0.1, delta=0.05, higher_is_better=hib, method=method,
                           n_extra_failures=extra)
        assert cs.bounds[i] == bound and int(cs.failed[i].sum()) == alone.k
        assert dict(cs.rules[i].ships) == dict(alone.ships)
        for name in ("mean", "median", "sd", "bootstrap_limit", "two_sd_limit", "n_finished", "n_ignored", "notes"):
            assert np.array_equal(getattr(cs.rules[i], name), getattr(alone, name), equal_nan=True), name
        assert (cs.band.k[i], cs.band.upper[i], cs.band.pointwise_upper[i], cs.band.certified[i]) == \
            (band.k[0], band.upper[0], band.pointwise_upper[0], band.certified[0])
        assert (cs.band.certified_tau_limit, cs.band.sample_floor, cs.band.band) == \
            (band.certified_tau_limit, band.sample_floor, band.band)
    assert len({r.bootstrap_limit for r in cs.rules}) == 1  # one bootstrap for every bar


def test_the_bootstrap_is_drawn_once_per_cell(monkeypatch):
    from recipe_audit.stats import rules

    drawn = []
    real = rules._bootstrap_means
    monkeypatch.setattr(rules, "_bootstrap_means", lambda *a: drawn.append(1) or real(*a))
    cell_statistics(np.linspace(0.5, 1.0, 30), (0.6, 0.7, 0.8, 0.9), B=50, rng=0)
    assert len(drawn) == 1
    apply_rules(np.linspace(0.5, 1.0, 30), 0.6, B=50, rng=0)
    assert len(drawn) == 2


def test_practice_statistics_without_a_finished_rerun_say_why():
    ps = practice_statistics([np.nan, np.inf], B=10, rng=0)
    assert ps.n_finished == 0 and np.isnan(ps.mean) and len(ps.notes) == 2
    assert dict(ps.ships(0.5)) == {"mean": False, "median": False, "bootstrap": False, "mean_minus_2sd": False}
