"""Does the card keep its promise? Simulated recipes with known failure probabilities (README, "Stop early, choose τ late").

Each simulated recipe is a metric distribution whose failure probability at every bar is known
exactly, ``β(τ) = P(X < τ)`` (unfinished reruns are a mass that fails every bar). Families:

* ``bimodal``: a working mode N(μ, σ) (μ ~ U(0.80, 0.90), σ ~ U(0.02, 0.06)) and, with
  probability π, a collapsed near-constant-predictor mode N(0.5, 0.01); π from
  {0, 0.02, 0.05, 0.08, 0.10, 0.12, 0.15, 0.20, 0.30} (around and above ε);
* ``unimodal``: N(μ, σ), μ ~ U(0.72, 0.90), σ ~ U(0.02, 0.08);
* ``discrete``: a bimodal recipe whose accuracy is measured on 120 items (rounded to 1/120: ties);

and in every family a share ν ∈ {0, 0.01, 0.03} of reruns does not finish (NaN). Each recipe is
rerun N times (N = 59, the default sweep, and N = 120); per recipe:

* the five comparison rules (mean, median, bootstrap, mean − 2 sd, card) at the pre-registered bar τ0 = 0.7 (``stats.apply_rules``; the
  bootstrap uses B = 200 resamples instead of the card's 2,000, for speed), and the simultaneous
  band (``stats.simultaneous_band``: ships at τ0 when its bound is ≤ ε);
* the same rules at a bar chosen after looking: the most demanding τ at which the rule ships
  (the τ that makes the recipe look best; exact, from the rule's statistic or order statistic);
* whether the bound holds at every τ at once: the card's pointwise curve U(k(τ), N) and the band,
  checked exactly at the order statistics (the claim fails iff β(x_(j+1)) > u_j for some j).

Columns of the table: P(ship at τ0 | β(τ0) > ε) — the promise: at most δ; the same just over
budget (ε < β(τ0) ≤ 1.5 ε, where shipping is most tempting); P(ship at τ0 | β(τ0) ≤ ε/2) — power;
P(the post-hoc τ has β(τ) > ε) over all recipes; P(bound ≥ β at every τ) — the band's promise: at
least 1 − δ. ε = δ = 0.10 (the audit defaults).

Run: ``python bench/simulate_promise.py`` (about 15 s on 2 cores; ``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipe_audit.stats import (  # noqa: E402
    RULES,
    apply_rules,
    band_sample_floor,
    clopper_pearson_upper,
    curtail_plan,
    simultaneous_band,
)

EPS = DELTA = 0.10
TAU0 = 0.7
GRID = 120  # items of a discrete audit set
B = 200
FAMILIES = ("bimodal", "unimodal", "discrete")
PI = np.array([0.0, 0.02, 0.05, 0.08, 0.10, 0.12, 0.15, 0.20, 0.30])
NU = np.array([0.0, 0.01, 0.03])
ROWS = [("mean", "mean ≥ τ"), ("median", "median ≥ τ"), ("bootstrap", "bootstrap 10th pct of mean ≥ τ (B = 200)"),
        ("mean_minus_2sd", "mean − 2·sd ≥ τ"), ("card", "recipe card (pointwise Clopper–Pearson)"),
        ("band", "simultaneous band (every τ at once)")]


def make_recipes(rng: np.random.Generator, r: int) -> dict[str, np.ndarray]:
    fam = rng.integers(0, 3, r)
    pi = np.where(fam == 1, 0.0, rng.choice(PI, r))
    mu = np.where(fam == 1, rng.uniform(0.72, 0.90, r), rng.uniform(0.80, 0.90, r))
    sd = np.where(fam == 1, rng.uniform(0.02, 0.08, r), rng.uniform(0.02, 0.06, r))
    return {"family": fam, "pi": pi, "mu": mu, "sd": sd, "nu": rng.choice(NU, r), "grid": fam == 2}


def sample(rng: np.random.Generator, rec: dict[str, np.ndarray], n: int) -> np.ndarray:
    r = rec["pi"].size
    work = rng.normal(rec["mu"][:, None], rec["sd"][:, None], (r, n))
    coll = rng.normal(0.5, 0.01, (r, n))
    x = np.where(rng.random((r, n)) < rec["pi"][:, None], coll, work)
    x = np.where(rec["grid"][:, None], np.round(x * GRID) / GRID, x)
    x[rng.random((r, n)) < rec["nu"][:, None]] = np.nan
    return x


def beta_at(rec: dict[str, np.ndarray], tau: np.ndarray) -> np.ndarray:
    """Exact P(a rerun fails bar τ) = P(X < τ), unfinished included; ``tau`` (R,) or (R, M)."""
    t = np.asarray(tau, dtype=float)
    expand = (lambda a: a[:, None]) if t.ndim == 2 else (lambda a: a)
    grid = expand(rec["grid"])
    # on a 1/120 grid: round(120 Y) < 120 τ  <=>  Y < (ceil(120 τ) - 1/2) / 120
    tt = np.where(grid, (np.ceil(t * GRID - 1e-9) - 0.5) / GRID, t)
    cont = (expand(rec["pi"]) * sps.norm.cdf(tt, 0.5, 0.01)
            + (1 - expand(rec["pi"])) * sps.norm.cdf(tt, expand(rec["mu"]), expand(rec["sd"])))
    out = expand(rec["nu"]) + (1 - expand(rec["nu"])) * cont
    return np.where(np.isneginf(t), 0.0, np.where(np.isposinf(t), 1.0, out))


def simulate(n: int, recipes: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    rec = make_recipes(rng, recipes)
    x = sample(rng, rec, n)
    eff = np.sort(np.where(np.isnan(x), -np.inf, x), axis=1)  # unfinished fail every bar
    beta0 = beta_at(rec, np.full(recipes, TAU0))
    k0 = np.sum(~(x >= TAU0), axis=1)
    ship = {name: np.zeros(recipes, bool) for name, _ in ROWS}
    posthoc_bad = {name: np.zeros(recipes, bool) for name, _ in ROWS}
    # the five comparison rules, one apply_rules call per recipe (the rules' statistics do not depend on τ)
    stat = {r: np.full(recipes, np.nan) for r in ("mean", "median", "bootstrap", "mean_minus_2sd")}
    boot_rng = np.random.default_rng(seed + 1)
    for i in range(recipes):
        d = apply_rules(x[i], TAU0, eps=EPS, delta=DELTA, B=B, rng=boot_rng)
        for r in RULES:
            ship[r][i] = d.ships[r]
        stat["mean"][i], stat["median"][i] = d.mean, d.median
        stat["bootstrap"][i], stat["mean_minus_2sd"][i] = d.bootstrap_limit, d.two_sd_limit
    # a bar chosen after looking: the most demanding τ at which each rule still ships
    for r, s in stat.items():
        ok = np.isfinite(s)
        posthoc_bad[r][ok] = beta_at({k: v[ok] for k, v in rec.items()}, s[ok]) > EPS
    band = simultaneous_band(n, DELTA)
    levels = np.asarray(band.levels)
    j_card = curtail_plan(n, EPS, DELTA).supported_max_k  # largest k the card ships with at this N
    j_band = band.max_certified_failures(EPS)
    ship["band"] = levels[k0] <= EPS
    assert np.array_equal(ship["card"], k0 <= j_card)
    for name, j in (("card", j_card), ("band", j_band)):
        if j >= 0:  # ships every τ with k(τ) <= j, i.e. every τ up to the (j+1)-th smallest value
            tau_hat = eff[:, j]
            posthoc_bad[name] = np.isfinite(tau_hat) & (beta_at(rec, np.where(np.isfinite(tau_hat), tau_hat, 0.0)) > EPS)
    # does the bound hold at every τ at once? (exact: at the order statistics)
    g = beta_at(rec, eff)
    pointwise = np.r_[np.asarray(clopper_pearson_upper(np.arange(n), n, DELTA)), 1.0]
    covers = {"card": ~np.any(g > pointwise[None, :-1] + 1e-12, axis=1),
              "band": ~np.any(g > levels[None, :-1] + 1e-12, axis=1)}
    return {"n": n, "recipes": recipes, "rec": rec, "beta0": beta0, "ship": ship, "posthoc_bad": posthoc_bad,
            "covers": covers, "band": band, "j_card": j_card, "j_band": j_band}


def _rate(mask: np.ndarray, sel: np.ndarray) -> str:
    m = int(sel.sum())
    if m == 0:
        return "—"
    return f"{mask[sel].mean():.3f}"


def table(res: dict) -> str:
    b0, fam = res["beta0"], res["rec"]["family"]
    bad, edge, good = b0 > EPS, (b0 > EPS) & (b0 <= 1.5 * EPS), b0 <= EPS / 2
    allr = np.ones_like(bad)
    head = ["rule", f"ship at τ0 \\| β > ε (n = {bad.sum()})", f"ship at τ0 \\| ε < β ≤ 1.5ε (n = {edge.sum()})",
            f"ship at τ0 \\| β ≤ ε/2 (n = {good.sum()})", "post-hoc τ: β(τ) > ε", "bound holds at every τ"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, label in ROWS:
        cov = f"{res['covers'][name].mean():.3f}" if name in res["covers"] else "—"
        lines.append(f"| {label} | {_rate(res['ship'][name], bad)} | {_rate(res['ship'][name], edge)} | "
                     f"{_rate(res['ship'][name], good)} | {_rate(res['posthoc_bad'][name], allr)} | {cov} |")
    per = []
    for f, fname in enumerate(FAMILIES):
        sel = fam == f
        per.append(f"{fname}: {sel.sum()} recipes, card ships {_rate(res['ship']['card'], sel & bad)} of those over "
                   f"budget, band covers every τ in {res['covers']['band'][sel].mean():.3f}")
    return "\n".join(lines) + "\n\nBy family — " + "; ".join(per) + "."


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", type=int, default=20000, help="recipes at N = 59 (half as many at N = 120)")
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--quick", action="store_true", help="2,000 recipes: a smoke run")
    a = ap.parse_args()
    r59 = 2000 if a.quick else a.recipes
    t0 = time.perf_counter()
    print(f"ε = δ = {EPS}; pre-registered bar τ0 = {TAU0}; band floor {band_sample_floor(EPS, DELTA)} reruns "
          f"(pointwise card: 22); bootstrap B = {B} (the card uses 2,000).\n")
    ok = True
    for n, recipes, seed in ((59, r59, a.seed), (120, r59 // 2, a.seed + 7)):
        res = simulate(n, recipes, seed)
        b = res["band"]
        print(f"### N = {n} reruns, {recipes} simulated recipes\n")
        print(f"Band: {b.label}, local level α = {b.local_level:.2e}, exact coverage {b.coverage:.4f} for a "
              f"continuous metric; at N = {n} the card ships with ≤ {res['j_card']} failures at the bar, "
              f"the band with ≤ {res['j_band']}.\n")
        print(table(res) + "\n")
        bad = res["beta0"] > EPS
        card_rate = res["ship"]["card"][bad].mean()
        cov = res["covers"]["band"].mean()
        se = np.sqrt(DELTA * (1 - DELTA) / recipes)
        checks = [("card ships a recipe over budget at most δ", card_rate <= DELTA),
                  ("band ships a recipe over budget at most δ", res["ship"]["band"][bad].mean() <= DELTA),
                  ("card at the post-hoc τ: over budget at most δ", res["posthoc_bad"]["card"].mean() <= DELTA),
                  ("band covers every τ with probability ≥ 1 − δ (within 2 SE)", cov >= 1 - DELTA - 2 * se)]
        for text, passed in checks:
            ok &= bool(passed)
            print(f"{'PASS' if passed else 'FAIL'}: {text}")
        print()
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
