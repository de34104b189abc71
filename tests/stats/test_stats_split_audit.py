"""Held-out split audit and evidence responsiveness against a per-split Python loop."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recipe_audit.stats import (
    RULES,
    AuditCell,
    EvidenceResponsiveness,
    SplitAuditResult,
    apply_rules,
    clopper_pearson_upper,
    evidence_responsiveness,
    held_out_split_audit,
    sample_floor,
)


def loop_reference(cells, eps, delta, n_splits, seed, *, audit_size=None, B=2000, audit_B=200,
                   higher_is_better=True, full_step=True):  # fmt: skip
    """Straightforward per-split loop consuming the generator as documented in split_audit.py.

    Returns per cell: (full-data ships dict or None, split ship counts, split violation counts).
    """
    rng = np.random.default_rng(seed)
    hib = higher_is_better
    n_min = sample_floor(eps, delta)
    out = []
    for metrics, tau, n_unfinished in cells:
        x = np.concatenate([np.asarray(metrics, dtype=float), np.full(n_unfinished, np.nan)])
        x[~np.isfinite(x)] = np.nan
        n = x.size
        n_audit = n // 2 if audit_size is None else audit_size
        fail = np.isnan(x) | ((x < tau) if hib else (x > tau))
        full = None
        if full_step:
            full = dict(apply_rules(x, tau, eps=eps, delta=delta, higher_is_better=hib, B=B, rng=rng).ships)
        u = rng.random((n_splits, n))
        audits = [np.sort(np.argsort(u[s])[:n_audit]) for s in range(n_splits)]
        counts = [int(np.isfinite(x[a]).sum()) for a in audits]
        boot_idx = {c: rng.integers(0, c, size=(audit_B, c)) for c in sorted(set(counts)) if c > 0}
        ships = dict.fromkeys(RULES, 0)
        viols = dict.fromkeys(RULES, 0)
        for a in audits:
            held = np.setdiff1d(np.arange(n), a)
            b = x[a][np.isfinite(x[a])]
            k_audit = int(fail[a].sum())
            held_frac = fail[held].mean() if held.size else np.nan
            dec = dict.fromkeys(RULES, False)
            if b.size:
                mean, median = np.mean(b), np.median(b)
                limit = np.percentile(b[boot_idx[b.size]].mean(axis=1), 10 if hib else 90)
                dec["mean"] = mean >= tau if hib else mean <= tau
                dec["median"] = median >= tau if hib else median <= tau
                dec["bootstrap"] = limit >= tau if hib else limit <= tau
                if b.size >= 2:
                    sd = np.std(b, ddof=1)
                    dec["mean_minus_2sd"] = mean - 2 * sd >= tau if hib else mean + 2 * sd <= tau
            dec["card"] = n_audit >= n_min and clopper_pearson_upper(k_audit, n_audit, delta) <= eps
            for r in RULES:
                if dec[r]:
                    ships[r] += 1
                    viols[r] += bool(held_frac > eps)
        out.append((full, ships, viols))
    return out


def make_cells(seed=0):
    rng = np.random.default_rng(seed)
    cells = []
    for i, (n, p_collapse) in enumerate([(23, 0.0), (40, 0.1), (59, 0.25), (30, 0.05), (26, 0.4)]):
        x = np.where(rng.random(n) < p_collapse, rng.normal(0.5, 0.01, n), rng.normal(0.82, 0.04, n))
        if i in (1, 2):
            x[rng.choice(n, 2, replace=False)] = np.nan  # unfinished reruns inside the metrics
        if i == 3:
            x[0] = np.inf
        cells.append((x, 0.75, 1 if i == 2 else 0))
    return cells


@pytest.mark.parametrize("audit_size", [None, 12])
def test_vectorised_equals_per_split_loop(audit_size):
    cells = make_cells()
    eps, delta, S = 0.1, 0.1, 150
    res = held_out_split_audit(
        [AuditCell(m, t, u) for m, t, u in cells], eps, delta, n_splits=S, rng=np.random.default_rng(42),
        audit_size=audit_size, B=500, audit_B=64,
    )  # fmt: skip
    ref = loop_reference(cells, eps, delta, S, 42, audit_size=audit_size, B=500, audit_B=64)
    assert isinstance(res, SplitAuditResult) and res.n_cells == len(cells)
    for cell, (full, ships, viols) in zip(res.cells, ref, strict=True):
        assert dict(cell.full_ships) == full
        assert dict(cell.split_ships) == ships
        assert dict(cell.split_violations) == viols
    for j, r in enumerate(RULES):
        ra = res.rules[j]
        assert ra.rule == r and res.by_rule[r] is ra
        assert ra.split_ships == sum(s[r] for _, s, _ in ref)
        assert ra.split_violations == sum(v[r] for _, _, v in ref)
        assert ra.cells_shipped_full == sum(f[r] for f, _, _ in ref)
    # the bootstrap rule did something non-trivial (neither always nor never)
    boot = res.by_rule["bootstrap"]
    assert 0 < boot.split_ships < S * len(cells)


def test_vectorised_equals_loop_lower_is_better():
    rng = np.random.default_rng(9)
    cells = []
    for n in (24, 33):
        loss = np.where(rng.random(n) < 0.2, rng.normal(2.0, 0.05, n), rng.normal(0.6, 0.1, n))
        loss[3] = np.nan
        cells.append((loss, 0.9, 0))
    res = held_out_split_audit(
        [(m, t) for m, t, _ in cells],
        0.15,
        0.2,
        n_splits=120,
        rng=7,
        B=300,
        audit_B=50,
        higher_is_better=False,
    )
    ref = loop_reference(cells, 0.15, 0.2, 120, 7, B=300, audit_B=50, higher_is_better=False)
    assert res.bootstrap_percentile == 90.0 and not res.higher_is_better
    for cell, (full, ships, viols) in zip(res.cells, ref, strict=True):
        assert dict(cell.full_ships) == full
        assert dict(cell.split_ships) == ships
        assert dict(cell.split_violations) == viols


def test_result_fields_rates_and_json():
    cells = make_cells(1)
    res = held_out_split_audit([(m, t, u) for m, t, u in cells], n_splits=200, rng=3)
    assert (res.n_splits, res.B, res.audit_B, res.audit_size, res.seed) == (200, 2000, 200, None, 3)
    assert res.sample_floor == 22 and "shared" in res.randomness
    for ra in res.rules:
        assert 0 <= ra.split_violations <= ra.split_ships <= 200 * len(cells)
        assert ra.p_violation_given_ship is None or 0.0 <= ra.p_violation_given_ship <= 1.0
        assert 0 <= ra.cells_shipped_full_over_budget <= ra.cells_shipped_full <= len(cells)
    over = [c for c in res.cells if c.failure_fraction > 0.1]
    assert res.by_rule["mean"].cells_shipped_full_over_budget == sum(dict(c.full_ships)["mean"] for c in over)
    assert [c.audit_size for c in res.cells] == [(len(m) + u) // 2 for m, _, u in cells]
    d = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert set(d["rules"]) == set(RULES) and d["audit_size"] == "floor(N/2)" and d["audit_B"] == 200


def test_same_seed_same_result_and_generator_accepted():
    cells = make_cells(2)
    a = held_out_split_audit(cells, n_splits=50, rng=5)
    b = held_out_split_audit(cells, n_splits=50, rng=np.random.default_rng(5))
    assert a.rules == b.rules and a.cells == b.cells
    assert b.seed is None and "Generator" in b.rng


def test_audit_cell():
    c = AuditCell([0.5, np.inf, 0.7], 0.6, n_unfinished=2)
    assert c.n == 5 and c.tau == 0.6
    assert np.isnan(c.metrics[1]) and not c.metrics.flags.writeable
    assert np.isnan(c.values[-2:]).all() and c.values.size == 5


def test_responsiveness_card_never_below_floor():
    rng = np.random.default_rng(4)
    clean = [(rng.normal(0.9, 0.02, 40), 0.7) for _ in range(3)]
    sizes = [5, 10, 21, 22, 30, 40]
    er = evidence_responsiveness(clean, sizes, n_splits=100, rng=1)
    assert isinstance(er, EvidenceResponsiveness)
    card = er.ship_fraction["card"]
    assert card == (0.0, 0.0, 0.0, 1.0, 1.0, 1.0)  # all clean: ships exactly from N_min = 22 on
    assert er.sample_floor == 22 and er.n_cells == (3,) * 6
    assert er.ship_fraction["mean"] == (1.0,) * 6


def test_responsiveness_rates_and_loop_agreement():
    cells = make_cells(5)
    sizes = [4, 12, 21, 22, 29, 45, 61]
    er = evidence_responsiveness([(m, t, u) for m, t, u in cells], sizes, n_splits=80, rng=11, audit_B=40)
    n_min = sample_floor(0.1, 0.1)
    for r in RULES:
        for f, s, nc in zip(er.ship_fraction[r], sizes, er.n_cells, strict=True):
            if nc == 0:
                assert f is None
            else:
                assert 0.0 <= f <= 1.0
                if r == "card" and s < n_min:
                    assert f == 0.0
    assert er.n_cells == tuple(sum(len(m) + u >= s for m, _, u in cells) for s in sizes)
    assert er.n_cells[-1] == 0
    json.dumps(er.to_dict(), allow_nan=False)
    # loop agreement for the sizes in order (one generator across sizes and cells, no full-data step)
    rng_seed = 11
    rng = np.random.default_rng(rng_seed)
    for j, s in enumerate(sizes):
        eligible = [c for c in cells if len(c[0]) + c[2] >= s]
        if not eligible:
            continue
        # reproduce this size's draws by running the loop with a generator in the same state
        state = rng.bit_generator.state
        seed_rng = np.random.default_rng()
        seed_rng.bit_generator.state = state
        ref = _loop_with_generator(eligible, s, 80, seed_rng)
        rng.bit_generator.state = seed_rng.bit_generator.state
        for r in RULES:
            assert er.ship_counts[RULES.index(r)][1][j] == sum(ships[r] for ships in ref)


def _loop_with_generator(cells, size, n_splits, gen):
    """The loop_reference split step (no full data) for one audit size, on an existing generator."""
    out = []
    n_min = sample_floor(0.1, 0.1)
    for metrics, tau, n_unfinished in cells:
        x = np.concatenate([np.asarray(metrics, dtype=float), np.full(n_unfinished, np.nan)])
        x[~np.isfinite(x)] = np.nan
        fail = np.isnan(x) | (x < tau)
        u = gen.random((n_splits, x.size))
        audits = [np.sort(np.argsort(u[s])[:size]) for s in range(n_splits)]
        counts = [int(np.isfinite(x[a]).sum()) for a in audits]
        boot_idx = {c: gen.integers(0, c, size=(40, c)) for c in sorted(set(counts)) if c > 0}
        ships = dict.fromkeys(RULES, 0)
        for a in audits:
            b = x[a][np.isfinite(x[a])]
            if b.size:
                ships["mean"] += np.mean(b) >= tau
                ships["median"] += np.median(b) >= tau
                ships["bootstrap"] += np.percentile(b[boot_idx[b.size]].mean(axis=1), 10) >= tau
                if b.size >= 2:
                    ships["mean_minus_2sd"] += np.mean(b) - 2 * np.std(b, ddof=1) >= tau
            ships["card"] += size >= n_min and clopper_pearson_upper(int(fail[a].sum()), size, 0.1) <= 0.1
        out.append(ships)
    return out
