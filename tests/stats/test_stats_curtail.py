"""Curtailment: the verdict at the planned N, settled early, checked by brute force."""

from __future__ import annotations

import numpy as np
import pytest

from recipe_audit.cards.curtail import curtail_reason  # the sentence the card and sweep record state
from recipe_audit.stats import (
    INSUFFICIENT,
    STRONG_UNSUPPORTED,
    SUPPORTED,
    UNSUPPORTED,
    StatsInputError,
    clopper_pearson_lower,
    clopper_pearson_upper,
    curtail_determined,
    curtail_plan,
    curtail_sequence,
    curtail_state,
    curtailed_verdict_array,
    simulate_curtailment,
    verdict,
)

SETTINGS = [(10, 0.1, 0.1), (22, 0.1, 0.1), (30, 0.1, 0.1), (59, 0.1, 0.1), (59, 0.05, 0.05), (40, 0.2, 0.05)]


@pytest.mark.parametrize("n,eps,delta", SETTINGS)
def test_determination_matches_brute_force_over_every_completion(n, eps, delta):
    """For every (k, m): enumerate every final failure count the remaining reruns can produce."""
    full = [verdict(kk, n, eps, delta) for kk in range(n + 1)]  # scalar verdicts, one at a time
    ks, ms = np.meshgrid(np.arange(n + 1), np.arange(1, n + 1), indexing="ij")
    ok = ks <= ms
    ks, ms = ks[ok], ms[ok]
    det_v = curtail_determined(ks, ms, n, eps, delta, "verdict")
    det_d = curtail_determined(ks, ms, n, eps, delta, "decision")
    cur = curtailed_verdict_array(ks, ms, n, eps, delta)
    for k, m, dv, dd, cv in zip(ks.tolist(), ms.tolist(), det_v, det_d, cur, strict=True):
        outcomes = {full[k + extra] for extra in range(n - m + 1)}
        assert dv == (len(outcomes) == 1)
        assert dd == (len({o == SUPPORTED for o in outcomes}) == 1)
        assert cv in outcomes  # the stated verdict is one the full sweep can reach
        assert (cv == SUPPORTED) == (outcomes == {SUPPORTED})  # never ships unless every completion does
        if dv:
            assert cv == full[k]
        if dd and SUPPORTED not in outcomes:
            assert cv == full[k]  # the most favourable verdict still possible
        # the stated bounds hold whatever the remaining reruns do
        finals = k + np.arange(n - m + 1)
        assert np.all(clopper_pearson_upper(k + n - m, n, delta) >= clopper_pearson_upper(finals, n, delta))
        assert np.all(clopper_pearson_lower(k, n, delta) <= clopper_pearson_lower(finals, n, delta))


def test_plan_thresholds():
    p = curtail_plan(59, 0.1, 0.1)
    assert (p.supported_max_k, p.strong_min_k) == (2, 10)
    assert p.verdicts[2] == SUPPORTED and p.verdicts[3] == UNSUPPORTED and p.verdicts[10] == STRONG_UNSUPPORTED
    small = curtail_plan(10, 0.1, 0.1)  # below the sample floor: nothing can be supported
    assert small.supported_max_k == -1 and set(small.verdicts) <= {INSUFFICIENT, STRONG_UNSUPPORTED}
    assert curtail_state(0, 1, 10).stop  # so the decision is settled by the first rerun
    assert curtail_plan(59, 0.05, 0.05).supported_max_k == 0


def test_states_and_reasons():
    s = curtail_state(3, 10, 59)
    assert s.stop and s.stopped_early and s.decision_determined and not s.verdict_determined
    assert s.k_range_at_n == (3, 52) and s.remaining == 49
    assert s.upper == pytest.approx(clopper_pearson_upper(52, 59, 0.1))
    assert s.upper_if_rest_pass == pytest.approx(clopper_pearson_upper(3, 59, 0.1))
    assert "not release-supported" in curtail_reason(s) and "at most 2" in curtail_reason(s)
    sup = curtail_state(0, 57, 59)
    assert sup.stop and sup.verdict == SUPPORTED and "even if all 2 fail" in curtail_reason(sup)
    open_ = curtail_state(1, 20, 59)
    assert not open_.stop and "not settled" in curtail_reason(open_)
    strong = curtail_state(10, 20, 59, stop_on="verdict")
    assert strong.stop and strong.verdict == STRONG_UNSUPPORTED and strong.possible_verdicts == (STRONG_UNSUPPORTED,)
    done = curtail_state(4, 59, 59)
    assert done.stop and not done.stopped_early and done.verdict == verdict(4, 59)
    assert curtail_state(3, 10, 59).to_dict()["possible_verdicts"] == [UNSUPPORTED, STRONG_UNSUPPORTED]


@pytest.mark.parametrize("n", [22, 59, 80])
@pytest.mark.parametrize("batch", [1, 4, 8])
def test_many_simulated_recipes_curtailed_equals_full_sweep(n, batch):
    """20,000 simulated recipes per setting (true failure probabilities from 0 to 0.9): every
    curtailed sweep states the full sweep's verdict (stop_on=verdict) and the full sweep's release
    decision (stop_on=decision), and the latter stops no later."""
    rng = np.random.default_rng(n * 10 + batch)
    sims = 20_000
    p = rng.choice([0.0, 0.02, 0.05, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3, 0.5, 0.9], size=(sims, 1))
    outcomes = rng.random((sims, n)) < p
    cum = np.cumsum(outcomes, axis=1)
    checks = np.unique(np.r_[np.arange(batch, n, batch), n])
    k_at = cum[:, checks - 1]
    m_at = np.broadcast_to(checks, k_at.shape)
    full = np.array([verdict(k, n) for k in range(n + 1)])[cum[:, -1]]
    stops = {}
    for stop_on in ("verdict", "decision"):
        first = np.argmax(curtail_determined(k_at, m_at, n, stop_on=stop_on), axis=1)
        rows = np.arange(sims)
        stated = curtailed_verdict_array(k_at[rows, first], checks[first], n)
        stops[stop_on] = checks[first]
        if stop_on == "verdict":
            assert np.array_equal(stated, full)
        assert np.array_equal(stated == SUPPORTED, full == SUPPORTED)
    assert np.all(stops["decision"] <= stops["verdict"])
    assert np.mean(stops["decision"] < n) > 0.3  # curtailment does save reruns here


def test_sequential_replay_of_simulated_recipes():
    rng = np.random.default_rng(2024)
    for _ in range(300):
        n = int(rng.choice([22, 30, 59]))
        outcomes = rng.random(n) < float(rng.choice([0.0, 0.05, 0.1, 0.2, 0.3, 0.5]))
        batch = int(rng.integers(1, 9))
        full = verdict(int(outcomes.sum()), n)
        sv = curtail_sequence(outcomes, 0.1, 0.1, batch, "verdict")
        sd = curtail_sequence(outcomes, 0.1, 0.1, batch, "decision")
        assert sv.verdict == full and full in sd.possible_verdicts
        assert (sd.verdict == SUPPORTED) == (full == SUPPORTED)
        for m in [*range(batch, n, batch), n]:  # by hand: the first batch boundary that settles it
            if curtail_determined(int(outcomes[:m].sum()), m, n, 0.1, 0.1, "decision"):
                assert m == sd.m
                break


def test_vectorised_simulation_agrees_with_the_sequential_replay():
    sim = simulate_curtailment(0.3, 59, batch_size=4, n_sims=400, rng=5)
    fails = np.random.default_rng(5).random((400, 59)) < 0.3  # the documented draw
    used = [curtail_sequence(f, batch_size=4).m for f in fails]
    assert sim.mean_used == pytest.approx(np.mean(used))
    assert sim.decision_agrees == 1.0
    v = simulate_curtailment(0.1, 59, batch_size=3, stop_on="verdict", n_sims=3000, rng=1)
    assert v.verdict_agrees == 1.0 and v.decision_agrees == 1.0


def test_compute_saved_target_at_a_failure_rate_of_0_3():
    sim = simulate_curtailment(0.3, 59, batch_size=4, n_sims=20_000, rng=0)
    assert sim.fraction_of_planned <= 0.25
    assert simulate_curtailment(0.0, 59, batch_size=4, n_sims=2000, rng=0).mean_used == 59


def test_bad_input():
    with pytest.raises(StatsInputError, match="stop_on"):
        curtail_determined(1, 2, 10, stop_on="never")
    with pytest.raises(StatsInputError, match="cannot exceed the planned"):
        curtail_state(0, 11, 10)
    with pytest.raises(StatsInputError):
        curtail_state(3, 2, 10)
    with pytest.raises(StatsInputError):
        curtail_sequence([0, 1, 0])
    with pytest.raises(StatsInputError):
        simulate_curtailment(1.5)
