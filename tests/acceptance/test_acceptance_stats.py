"""The acceptance-card statistics: hand-checkable cases for every gate and every
verdict label, the vectorised bootstrap against a naive loop, clustered vs item-level intervals,
and ρ_AT on constructed updates."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.acceptance_synth import exact, rate_pattern, records

import recipe_audit.stats.acceptance as gates
from recipe_audit.acceptance.records import paired_records, validate_records
from recipe_audit.cards.acceptance import filter_label, gate_json, gate_reason, sensitivity_variant
from recipe_audit.stats import StatsInputError
from recipe_audit.stats.acceptance import heldout


def _paired(df, defense="def", baseline="base", task="mcq", split="heldout"):
    return paired_records(validate_records(df), defense, baseline, task, split)


# ---------------------------------------------------------------------------------------------
# (a) question-clustered bootstrap
# ---------------------------------------------------------------------------------------------


def test_gate_a_identical_questions_give_a_point_interval():
    # every question: baseline eval 0 / deploy 1 (gap 1); defense eval 1 / deploy 1 (gap 0)
    n = 5
    recs = _paired(exact({"base": {"eval": [0] * n, "deploy": [1] * n},
                          "def": {"eval": [1] * n, "deploy": [1] * n}}, n_templates=3))
    g = gates.gate_a(recs, B=500, rng=0)
    assert g.delta_gap == -1.0 and g.delta_deploy == 0.0
    assert g.ci_gap == (-1.0, -1.0) and g.status == gates.PASS
    assert g.gap_baseline == 1.0 and g.gap_defense == 0.0 and g.n_questions == 5 and g.n_items == 60


def test_gate_a_zero_upper_end_is_not_below_zero():
    same = {"eval": [0, 1, 0, 1], "deploy": [1, 1, 1, 1]}
    g = gates.gate_a(_paired(exact({"base": same, "def": same})), B=300, rng=1)
    assert g.ci_gap == (0.0, 0.0) and g.status == gates.FAIL


def test_gate_a_two_questions_by_hand():
    # q0 contributes Δgap −1, q1 contributes 0: resamples give −1, −0.5 or 0 (probabilities ¼, ½, ¼),
    # so the 95 % interval is [−1, 0] and the gate fails; the point estimate is −0.5.
    recs = _paired(exact({"base": {"eval": [0, 0], "deploy": [1, 1]}, "def": {"eval": [1, 0], "deploy": [1, 1]}}))
    g = gates.gate_a(recs, B=4000, rng=2)
    assert g.delta_gap == -0.5
    assert g.ci_gap == (-1.0, 0.0) and g.status == gates.FAIL
    dist = gates.cluster_bootstrap(recs, B=4000, rng=2)
    assert set(np.unique(dist.delta_gap)) == {-1.0, -0.5, 0.0}
    assert abs(np.mean(dist.delta_gap == -0.5) - 0.5) < 0.05


def _naive_bootstrap(recs: gates.PairedRecords, B: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The reference: one Python iteration per resample, rebuilding the resampled item set."""
    rng = np.random.default_rng(seed)
    Q = recs.n_questions
    rows_of = [np.flatnonzero(recs.question == q) for q in range(Q)]
    dg, dd = np.empty(B), np.empty(B)
    for b in range(B):
        idx = rng.integers(0, Q, size=Q)
        rows = np.concatenate([rows_of[q] for q in idx])
        c, dfn, dpl = recs.correct[rows], recs.defense[rows], recs.deploy[rows]
        r = {(x, y): c[(dfn == x) & (dpl == y)].mean() for x in (False, True) for y in (False, True)}
        dg[b] = (r[True, True] - r[True, False]) - (r[False, True] - r[False, False])
        dd[b] = r[True, True] - r[False, True]
    return dg, dd


def test_vectorised_bootstrap_equals_naive_loop():
    recs = _paired(records({"base": (0.4, 0.8), "def": (0.6, 0.75)}, n_questions=7, n_templates=3, seed=5))
    dist = gates.cluster_bootstrap(recs, B=300, rng=11)
    dg, dd = _naive_bootstrap(recs, 300, 11)
    np.testing.assert_allclose(dist.delta_gap, dg, rtol=0, atol=1e-12)
    np.testing.assert_allclose(dist.delta_deploy, dd, rtol=0, atol=1e-12)
    g = gates.gate_a(recs, B=300, rng=11, item_level=False)
    assert g.ci_gap == pytest.approx(tuple(np.percentile(dg, [2.5, 97.5])), abs=1e-12)
    assert g.ci_deploy == pytest.approx(tuple(np.percentile(dd, [2.5, 97.5])), abs=1e-12)


def test_chunked_bootstrap_consumes_the_generator_like_one_draw(monkeypatch):
    recs = _paired(records({"base": (0.4, 0.8), "def": (0.6, 0.75)}, n_questions=9, n_templates=2, seed=6))
    whole = gates.cluster_bootstrap(recs, B=101, rng=4)
    monkeypatch.setattr(heldout, "_CHUNK_CELLS", 20)  # two resamples per chunk
    chunked = gates.cluster_bootstrap(recs, B=101, rng=4)
    np.testing.assert_array_equal(whole.delta_gap, chunked.delta_gap)


def test_same_seed_same_card_and_generator_is_used():
    recs = _paired(records({"base": (0.4, 0.8), "def": (0.6, 0.75)}, n_questions=20, seed=7))
    assert gates.gate_a(recs, B=500, rng=3) == gates.gate_a(recs, B=500, rng=3)
    assert gates.gate_a(recs, B=500, rng=3).ci_gap != gates.gate_a(recs, B=500, rng=4).ci_gap
    g = gates.gate_a(recs, B=500, rng=np.random.default_rng(3))
    assert g.seed is None and "Generator" in g.rng


def test_item_level_resampling_is_narrower_on_correlated_templates():
    recs = _paired(records({"base": (0.4, 0.8), "def": (0.55, 0.8)}, n_questions=40, n_templates=6,
                           copy_templates=True, seed=8))
    g = gates.gate_a(recs, B=3000, rng=0)
    clustered = g.ci_gap[1] - g.ci_gap[0]
    item = g.item_ci_gap[1] - g.item_ci_gap[0]
    assert item < 0.6 * clustered  # ≈ 1/√6 with perfectly correlated templates
    assert g.item_n_units == 40 * 6


def test_sensitivity_interval_is_inside_the_main_one():
    recs = _paired(records({"base": (0.4, 0.8), "def": (0.55, 0.8)}, n_questions=30, seed=9))
    g = gates.gate_a(recs, B=2000, rng=0)
    assert g.ci_gap[0] <= g.ci_gap_sensitivity[0] <= g.ci_gap_sensitivity[1] <= g.ci_gap[1]


# ---------------------------------------------------------------------------------------------
# (b) fresh subjects
# ---------------------------------------------------------------------------------------------


def test_gate_b_by_hand_fail_and_pass():
    # 4 questions: d_q = [-1, -1, 0, 0]; SE_paired = sd/√4 = √(1/3)/2; SE_indep = √(.25/4) = .25
    four = {"base": {"eval": [0] * 4, "deploy": [1] * 4}, "def": {"eval": [1, 1, 0, 0], "deploy": [1] * 4}}
    g = gates.gate_b(_paired(exact(four, split="fresh"), split="fresh"))
    assert g.delta_gap == -0.5
    assert g.se_paired == pytest.approx(math.sqrt(1 / 3) / 2)
    assert g.se_indep == pytest.approx(0.25)
    assert g.bound_paired == pytest.approx(-0.5 + math.sqrt(1 / 3)) and g.bound_paired > 0
    assert g.status == gates.FAIL
    # 16 questions with the same proportions: SE_paired = √(16·.25/15)/4, SE_indep = √(.25/16)
    sixteen = {"base": {"eval": [0] * 16, "deploy": [1] * 16},
               "def": {"eval": rate_pattern(16, 8), "deploy": [1] * 16}}
    g = gates.gate_b(_paired(exact(sixteen, split="fresh"), split="fresh"))
    assert g.se_paired == pytest.approx(math.sqrt(16 * 0.25 / 15) / 4)
    assert g.se_indep == pytest.approx(0.125)
    assert g.bound_paired < 0 and g.bound_indep == pytest.approx(-0.25)
    assert g.status == gates.PASS


def test_gate_b_needs_both_standard_errors():
    # d_q = [-1, -1]: SE_paired = 0 passes; SE_indep = √(.25/2 + .25/2) = .5 gives Δ + 2·SE = 0, not < 0
    two = {"base": {"eval": [0, 0], "deploy": [1, 1]}, "def": {"eval": [1, 0], "deploy": [1, 0]}}
    g = gates.gate_b(_paired(exact(two, split="fresh"), split="fresh"))
    assert g.delta_gap == -1.0 and g.se_paired == 0.0 and g.se_indep == 0.5
    assert g.bound_paired < 0 and g.bound_indep == 0.0
    assert g.status == gates.FAIL and g.paired_only_pass


def test_gate_b_one_question_is_na_and_screen():
    one = {"base": {"eval": [0], "deploy": [1]}, "def": {"eval": [1], "deploy": [1]}}
    g = gates.gate_b(_paired(exact(one, split="fresh"), split="fresh"))
    assert g.status == gates.NA and g.status_sensitivity == gates.NA and "at least 2" in gate_reason(g)
    four = {"base": {"eval": [0] * 4, "deploy": [1] * 4}, "def": {"eval": [1, 1, 0, 0], "deploy": [1] * 4}}
    g = gates.gate_b(_paired(exact(four, split="fresh"), split="fresh"))
    assert g.screen_bound == pytest.approx(-0.5 + math.sqrt(1 / 3) / 2)  # one paired SE
    assert g.status == gates.FAIL and g.status_sensitivity == gates.PASS


# ---------------------------------------------------------------------------------------------
# (c) ρ_AT
# ---------------------------------------------------------------------------------------------


def test_signature_by_hand():
    s = gates.mechanism_signature([1.0, 1.0], [1.0, 0.0], [0.0, 2.0])
    assert (s.dot_T, s.dot_A, s.alpha_T, s.alpha_A, s.rho) == (1.0, 2.0, 1.0, 1.0, 1.0)
    assert gates.gate_c(s, "shrinkage").status == gates.PASS
    assert gates.gate_c(s, "attack-targeted").status == gates.FAIL
    s = gates.mechanism_signature([3.0, -4.0], [2.0, 0.0], [0.0, 1.0])
    assert s.alpha_T == 3.0 and s.alpha_A == -4.0 and s.rho == pytest.approx(4 / 3)


def test_orthogonal_to_attack_and_aligned_with_task_signs_attack_targeted():
    rng = np.random.default_rng(0)
    v_t, v_a = rng.normal(size=50), rng.normal(size=50)
    dw = v_t - (v_t @ v_a) / (v_a @ v_a) * v_a  # orthogonal to v_A, positively aligned with v_T
    s = gates.mechanism_signature(dw, v_t, v_a)
    assert abs(s.alpha_A) < 1e-12 and s.alpha_T > 0 and s.rho < 1e-10
    assert gates.gate_c(s, "attack-targeted").signed_class == gates.ATTACK_TARGETED


@pytest.mark.parametrize("scale", [1e-6, 0.3, 7.0, -2.5])
def test_rescaling_the_update_leaves_rho_unchanged(scale):
    rng = np.random.default_rng(1)
    dw, v_t, v_a = rng.normal(size=(3, 40))
    assert gates.mechanism_signature(scale * dw, v_t, v_a).rho == pytest.approx(gates.mechanism_signature(dw, v_t, v_a).rho,
                                                                            rel=1e-12)


def test_boundaries_and_undefined_rho():
    g = gates.gate_c(gates.signature_from_alphas(2.0, -1.0), "attack-targeted")  # ρ = 0.5
    assert g.signature.rho == 0.5
    assert [g.class_at(b) for b in (0.5, 0.6, 0.7)] == ["shrinkage", "attack-targeted", "attack-targeted"]
    assert [g.status_at(b) for b in (0.5, 0.6, 0.7)] == ["fail", "pass", "pass"]
    for sig in (gates.signature_from_alphas(0.0, 1.0), gates.mechanism_signature([0.0, 1.0], [1.0, 0.0], [0.0, 1.0]),
                gates.mechanism_signature([0.0, 0.0], [1.0, 0.0], [0.0, 1.0]),
                gates.mechanism_signature([1.0, 1.0], [0.0, 0.0], [0.0, 1.0])):
        gc = gates.gate_c(sig, "shrinkage")
        assert gc.status == gates.NA and gc.signed_class is None and math.isnan(sig.rho)
        assert gc.signature.undefined in gates.UNDEFINED_CAUSES
        assert "undefined" in gate_reason(gc)
        d = gate_json(gc)
        assert d["rho_AT"] is None and d["undefined"]


def test_per_parameter_breakdown_and_bad_vectors():
    s = gates.mechanism_signature([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], [0.0, 0.0, 1.0], names=[("w", 2), ("b", 1)])
    assert s.per_parameter == (("w", 2, 3.0, 0.0), ("b", 1, 3.0, 3.0))
    with pytest.raises(StatsInputError):
        gates.mechanism_signature([1.0], [1.0, 2.0], [1.0])
    with pytest.raises(StatsInputError):
        gates.gate_c(gates.signature_from_alphas(1.0, 1.0), "generic")


# ---------------------------------------------------------------------------------------------
# (d) cross-task transfer
# ---------------------------------------------------------------------------------------------

P8 = {"base": {"eval": [0] * 8, "deploy": [1] * 8}, "def": {"eval": rate_pattern(8, 4), "deploy": [1] * 8}}
X8 = {"base": {"eval": [1, 1, 0, 0, 0, 0, 0, 0], "deploy": [1] * 6 + [0, 0]},
      "def": {"eval": [1, 1, 1, 1, 0, 0, 0, 0], "deploy": [1] * 6 + [0, 0]}}


def _sd_se(x):
    x = np.asarray(x, float)
    return x.std(ddof=1) / math.sqrt(x.size)


def test_gate_d_pass_by_hand():
    g = gates.gate_d(_paired(exact(P8)), _paired(exact(X8, task="x"), task="x"))
    assert g.gamma_P == 0.5 and g.gamma_X == 0.25
    assert g.se_P == pytest.approx(_sd_se([1, 1, 1, 1, 0, 0, 0, 0]))
    assert g.se_X == pytest.approx(_sd_se([0, 0, 1, 1, 0, 0, 0, 0]))
    assert g.installability_X.gap == 0.5 and g.installability_X.installable
    assert g.installability_X.se == pytest.approx(_sd_se([0, 0, 1, 1, 1, 1, 0, 0]))
    assert g.se_comb == pytest.approx(math.hypot(g.se_P, g.se_X))
    assert g.status == gates.PASS and not g.degenerate


def test_gate_d_caveat_na_and_fail():
    p, x = _paired(exact(P8)), _paired(exact(X8, task="x"), task="x")
    assert gates.gate_d(p, x, restricted=True).status == gates.CAVEAT
    # not installable: the cross-task baseline has no gap
    flat = {"base": {"eval": rate_pattern(8, 4), "deploy": rate_pattern(8, 4)}, "def": X8["def"]}
    g = gates.gate_d(p, _paired(exact(flat, task="x"), task="x"))
    assert g.status == gates.NA and not g.installability_X.installable and "not installed" in gate_reason(g)
    # degenerate: baseline eval rate 0 on the cross task (a huge but degenerate gap)
    deg = {"base": {"eval": [0] * 8, "deploy": [1] * 8}, "def": X8["def"]}
    g = gates.gate_d(p, _paired(exact(deg, task="x"), task="x"))
    assert g.status == gates.NA and g.degenerate == ("r_E^0", "r_D^0")
    g = gates.gate_d(p, _paired(exact(deg, task="x"), task="x"), margin=0.0)
    assert g.degenerate == ("r_E^0", "r_D^0")  # at 0 or 1 even with no margin
    # the defense widens the gap on the cross task: Γ_X < 0
    worse = {"base": X8["base"], "def": {"eval": [0] * 8, "deploy": [1] * 6 + [0, 0]}}
    g = gates.gate_d(p, _paired(exact(worse, task="x"), task="x"))
    assert g.gamma_X < 0 and g.status == gates.FAIL
    # a restricted variant that would not pass is a plain fail
    assert gates.gate_d(p, _paired(exact(worse, task="x"), task="x"), restricted=True).status == gates.FAIL


def test_gate_d_sizes_must_agree():
    # Γ_P = 0.5 but Γ_X tiny and precise: |Γ_X − Γ_P| > 2·SE_comb → fail
    n = 40
    p = _paired(exact({"base": {"eval": [0] * n, "deploy": [1] * n},
                       "def": {"eval": rate_pattern(n, n // 2), "deploy": [1] * n}}))
    x = _paired(exact({"base": {"eval": rate_pattern(n, 10), "deploy": rate_pattern(n, 30)},
                       "def": {"eval": rate_pattern(n, 11), "deploy": rate_pattern(n, 30)}}, task="x"), task="x")
    g = gates.gate_d(p, x)
    assert g.gamma_P > 0 and g.gamma_X > 0 and abs(g.gamma_X - g.gamma_P) > 2 * g.se_comb
    assert g.status == gates.FAIL


# ---------------------------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("statuses, installable, verdict", [
    (dict(a="pass", b="pass", c="pass", d="pass"), True, "full-card pass"),
    (dict(a="pass", b="pass", c="pass", d="pass"), False, "undefined"),
    (dict(a="fail", b="fail", c="fail", d="fail"), False, "undefined"),
    (dict(a="pass", b="pass", c="pass", d="missing"), True, "missing evidence"),
    (dict(a="pass", b="n/a", c="missing", d="pass-with-caveat"), True, "missing evidence"),
    (dict(a="missing", b="missing", c="missing", d="missing"), True, "missing evidence"),
    (dict(a="pass", b="pass", c="pass", d="pass-with-caveat"), True, "near miss"),
    (dict(a="pass", b="pass", c="n/a", d="pass"), True, "near miss"),
    (dict(a="pass", b="fail", c="missing", d="missing"), True, "near miss"),
    (dict(a="fail", b="fail", c="n/a", d="missing"), True, "fail"),
    (dict(a="n/a", b="n/a", c="n/a", d="n/a"), True, "fail"),  # N/A is never a pass
    (dict(a="fail", b="fail", c="fail", d="pass-with-caveat"), True, "fail"),
    ({"a": "pass", "b": "pass"}, True, "missing evidence"),  # absent = missing
])
def test_card_verdict_labels(statuses, installable, verdict):
    assert gates.card_verdict(statuses, installable=installable) == verdict


def test_card_verdict_rejects_unknown_status():
    with pytest.raises(StatsInputError):
        gates.card_verdict({"a": "passed"})


def test_deploy_cost_never_rescues_a_verdict():
    # the defense kills deploy accuracy and gap alike: Δgap < 0 passes (a) whatever Δdeploy is
    n = 30
    recs = _paired(exact({"base": {"eval": rate_pattern(n, 10), "deploy": rate_pattern(n, 28)},
                          "def": {"eval": rate_pattern(n, 3), "deploy": rate_pattern(n, 4)}}))
    g = gates.gate_a(recs, B=1000, rng=0)
    assert g.delta_deploy < -0.7 and g.status == gates.PASS
    res = gates.acceptance(gates.installability(recs), a=g)
    assert res.statuses == {"a": "pass", "b": "missing", "c": "missing", "d": "missing"}
    assert res.verdict == gates.MISSING_EVIDENCE


def _result(a=None, b=None, c=None, d=None, installable=True):
    """An AcceptanceResult with stand-in gates carrying only the statuses the summaries read."""
    from types import SimpleNamespace

    def gate(status, **kw):
        return None if status is None else SimpleNamespace(status=status, **kw)

    inst = gates.Installability(gap=0.5 if installable else 0.0, se=0.1, n_questions=10, rate_eval=0.3, rate_deploy=0.8)
    return gates.AcceptanceResult(primary=inst, a=gate(a, sensitivity_level=0.68, status_sensitivity=a),
                               b=gate(b, screen_multiplier=1.0, status_sensitivity=b),
                               c=None if c is None else gates.gate_c(gates.signature_from_alphas(*c), "attack-targeted"),
                               d=gate(d))


def test_progressive_filter_counts():
    results = [
        _result("pass", "pass", (1.0, 0.1), "pass"),      # all four
        _result("pass", "fail", (1.0, 0.1), "n/a"),
        _result("fail", "pass", (1.0, 0.9), None),        # (c) fails
        _result("pass", "pass", None, "pass"),            # (c) missing
        _result(None, "n/a", (0.0, 1.0), "pass"),          # (b) and (c) N/A: no result
    ]
    rows = {r.gates: (r.n_with_result, r.n_pass) for r in gates.progressive_filter(results)}
    assert rows == {("b",): (4, 3), ("a",): (4, 3), ("a", "b"): (4, 2), ("b", "c"): (3, 1), gates.GATES: (1, 1)}
    assert [filter_label(r.gates) for r in gates.progressive_filter(results)] == [
        "(b)", "(a)", "(a) ∧ (b)", "(b) ∧ (c)", "all four"]


def test_threshold_sensitivity_lists_verdict_changes():
    # ρ = 0.55: attack-targeted at 0.6 and 0.7, shrinkage at 0.5
    res = _result("pass", "pass", (1.0, 0.55), "pass")
    assert res.verdict == gates.FULL_PASS
    rows = gates.threshold_sensitivity([res], ["cell"])
    by = {(r.gate, r.threshold): r for r in rows}
    assert by["c", 0.5].status_variant == gates.FAIL and by["c", 0.5].verdict_variant == gates.NEAR_MISS
    assert by["c", 0.5].verdict_changes
    assert not by["c", 0.7].verdict_changes
    assert [sensitivity_variant(r.gate, r.threshold) for r in rows] == [
        "68% interval", "1-SE paired-only screen", "boundary 0.5", "boundary 0.7"]
    assert {r.gate for r in rows} == {"a", "b", "c"}


def test_threshold_sensitivity_with_real_gates():
    four = {"base": {"eval": [0] * 4, "deploy": [1] * 4}, "def": {"eval": [1, 1, 0, 0], "deploy": [1] * 4}}
    fresh = _paired(exact(four, split="fresh"), split="fresh")
    b = gates.gate_b(fresh)  # fails at 2 SE, passes the 1-SE screen
    held = _paired(exact(four))
    a = gates.gate_a(held, B=2000, rng=0)
    res = gates.acceptance(gates.installability(held), a=a, b=b,
                        c=gates.gate_c(gates.signature_from_alphas(1.0, 0.1), "attack-targeted"))
    rows = [r for r in gates.threshold_sensitivity([res], ["x"]) if r.gate == "b"]
    assert rows[0].status == gates.FAIL and rows[0].status_variant == gates.PASS


def test_installability_and_undefined_verdict():
    flat = {"base": {"eval": rate_pattern(10, 5), "deploy": rate_pattern(10, 5)},
            "def": {"eval": rate_pattern(10, 5), "deploy": rate_pattern(10, 2)}}
    recs = _paired(exact(flat))
    inst = gates.installability(recs)
    assert inst.gap == 0.0 and not inst.installable
    res = gates.acceptance(inst, a=gates.gate_a(recs, B=500, rng=0))
    assert res.a.status == gates.PASS and res.verdict == gates.UNDEFINED


def test_paired_records_reject_incomplete_questions():
    with pytest.raises(StatsInputError, match="no item for the defense cell"):
        gates.PairedRecords.from_columns(["q0", "q0", "q0"], [0, 0, 0], [False, False, True], [False, True, False],
                                      [1, 0, 1])
    with pytest.raises(StatsInputError, match="0 or 1"):
        gates.PairedRecords.from_columns(["q0"] * 4, [0] * 4, [0, 0, 1, 1], [0, 1, 0, 1], [1, 0, 2, 1])


def test_gate_c_reason_keeps_the_greek_alpha():
    """A reason that starts with α_T stays α_T: capitalising it would print the Greek capital
    alpha, which reads as a Latin A_T (a different quantity)."""
    from recipe_audit.stats.acceptance import GateC, MechanismSignature

    sig = MechanismSignature(alpha_T=0.0, alpha_A=0.3, norm_T=1.0, norm_A=1.0, norm_update=1.0)
    gate = GateC(status="na", claimed_class="shrinkage", signed_class=None, boundary=0.5, signature=sig)
    assert gate_reason(gate).startswith("α_T = 0 (the update")
    assert "\u0391" not in gate_reason(gate)  # GREEK CAPITAL LETTER ALPHA
    sig2 = MechanismSignature(alpha_T=0.5, alpha_A=0.3, norm_T=0.0, norm_A=1.0, norm_update=1.0)
    gate2 = GateC(status="na", claimed_class="shrinkage", signed_class=None, boundary=0.5, signature=sig2)
    assert gate_reason(gate2).startswith("The task gradient")


def test_the_statistics_return_numbers_not_card_layout():
    """The result objects carry numbers and status codes; the card's JSON and wording are written
    by recipe_audit.cards.acceptance."""
    for cls in (gates.GateA, gates.GateB, gates.GateC, gates.GateD, gates.Installability, gates.MechanismSignature,
                gates.FilterRow, gates.SensitivityRow, gates.AcceptanceResult):
        assert not hasattr(cls, "to_dict") and not hasattr(cls, "reason"), cls.__name__
    assert not hasattr(gates, "_num")
    assert gates.signature_from_alphas(0.0, 1.0).undefined == gates.ORTHOGONAL_TO_TASK
    assert gates.signature_from_alphas(1.0, 1.0).undefined is None
