"""Does the card keep its promise? Simulated recipes with known failure probabilities (docs/guide/stop-early.md).

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

Two further tables check the choices made *after looking* (docs/family_and_anytime.md):

* **the best of M recipes**: M = 3, 10, 30 recipes, all over budget (β just above ε), N = 59 reruns
  each; the user ships whichever card looks best. P(ship a bad recipe) for the pointwise card (any
  of the M certified) and for the family-wise card (Holm's step-down: it certifies some recipe
  exactly when the best one passes at δ/M); and, as its price, P(certify one good recipe
  (β = 0.02) hidden among M − 1 bad ones);
* **adding seeds until it looks good**: the card read after every batch of 5 seeds, up to 200, and
  the sweep stopped at the first ``release-supported``. P(ever ship a bad recipe) for the pointwise
  card, for the exact bound at risk δ·6/(π² j²) at the j-th look (a union bound over the looks) and
  for the confidence sequence; then the mean number of seeds the confidence sequence needs at true
  failure rates 0, 0.02 and 0.05, and how often it ends release-supported.

Each probability is computed exactly (binomial sums, and a forward recursion over the looks) and
by simulation beside it (vectorised draws of every rerun).

Run: ``python bench/simulate_promise.py`` (about a minute of CPU time; ``--quick`` for a smoke run,
``--only-after-looking`` for the last two tables alone, a second or two).
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
    anytime_sample_floor,
    anytime_thresholds,
    apply_rules,
    band_sample_floor,
    clopper_pearson_upper,
    curtail_plan,
    family_sample_floor,
    simultaneous_band,
    stop_probabilities,
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


# ---------------------------------------------------------------------------------------------
# Choosing after looking: the best of M recipes, and seeds added until the card looks good
# ---------------------------------------------------------------------------------------------

N_FAMILY = 59
FAMILY_MS = (1, 3, 10, 30)
BAD_BETAS = (0.10, 0.11, 0.15)  # 0.10: the limit from above, the worst case over recipes over budget
GOOD_BETA = 0.02
BATCH, MAX_SEEDS = 5, 200
POWER_BETAS = (0.0, 0.02, 0.05)


def _ship_prob(n: int, beta: float, max_k: int) -> float:
    return float(sps.binom.cdf(max_k, n, beta)) if max_k >= 0 else 0.0


def best_of_m(sims: int, seed: int) -> tuple[str, list[tuple[str, bool]]]:
    """P(ship a bad recipe) when the best of M is shipped: exact, and simulated beside it."""
    rng = np.random.default_rng(seed)
    a_point = curtail_plan(N_FAMILY, EPS, DELTA).supported_max_k
    head = ["M", "family-wise floor"] + [f"β = {b:.2f}: pointwise / family-wise" for b in BAD_BETAS] + [
        f"one good recipe (β = {GOOD_BETA}) certified: pointwise / family-wise at δ/M"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    checks = []
    for m in FAMILY_MS:
        a_fam = curtail_plan(N_FAMILY, EPS, DELTA / m).supported_max_k
        cells = [str(m), str(family_sample_floor(EPS, DELTA, m))]
        for b in BAD_BETAS:
            exact_p = [1 - (1 - _ship_prob(N_FAMILY, b, a)) ** m for a in (a_point, a_fam)]
            k = rng.binomial(N_FAMILY, b, (sims, m))
            sim_p = [np.mean(np.any(k <= a, axis=1)) for a in (a_point, a_fam)]
            cells.append(f"{exact_p[0]:.3f} ({sim_p[0]:.3f}) / **{exact_p[1]:.3f}** ({sim_p[1]:.3f})")
            checks.append((f"best of M = {m} at β = {b}: family-wise ships a bad recipe at most δ", exact_p[1] <= DELTA))
            if m >= 3 and b == BAD_BETAS[0]:
                checks.append((f"best of M = {m} at β = ε⁺: the pointwise card ships a bad recipe more often than δ",
                               exact_p[0] > DELTA))
        good = [_ship_prob(N_FAMILY, GOOD_BETA, a) for a in (a_point, a_fam)]
        cells.append(f"{good[0]:.3f} / {good[1]:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), checks


def _simulate_peeking(rng, beta: float, looks: np.ndarray, sup: np.ndarray, strong: np.ndarray, sims: int):
    k = np.cumsum(rng.random((sims, int(looks[-1]))) < beta, axis=1)[:, looks - 1]
    ship, bad = k <= sup, k >= strong
    stop = ship | bad
    first = np.where(stop.any(axis=1), np.argmax(stop, axis=1), looks.size - 1)
    rows = np.arange(sims)
    return float(ship[rows, first].mean()), float(looks[first].mean())


def peeking(sims: int, seed: int) -> tuple[str, str, list[tuple[str, bool]]]:
    """Seeds added in batches of 5 up to 200, the card read after every batch."""
    rng = np.random.default_rng(seed)
    looks = np.arange(BATCH, MAX_SEEDS + 1, BATCH)
    never = np.full(looks.size, MAX_SEEDS + 1)
    point = curtail_plan  # the pointwise card at each look
    rules = {
        "pointwise card, read at every look": (
            np.array([point(int(n), EPS, DELTA).supported_max_k for n in looks]),
            np.array([point(int(n), EPS, DELTA).strong_min_k for n in looks])),
        "exact bound at δ·6/(π² j²) at the j-th look": (
            np.array([point(int(n), EPS, DELTA * 6 / (np.pi**2 * j**2)).supported_max_k
                      for j, n in enumerate(looks, start=1)]), never),
        "confidence sequence (anytime card)": tuple(np.array(x) for x in zip(
            *(anytime_thresholds(int(n), EPS, DELTA) for n in looks), strict=True)),
    }
    head = ["rule"] + [f"P(ever ships) at β = {b:.2f}" for b in BAD_BETAS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    checks = []
    for name, (sup, strong) in rules.items():
        cells = [name]
        for b in BAD_BETAS:
            ex = stop_probabilities(b, looks, sup, strong)["p_supported"]
            sim, _ = _simulate_peeking(rng, b, looks, sup, strong, sims)
            cells.append(f"{ex:.3f} ({sim:.3f})" if ex >= 5e-4 else f"{ex:.1e} ({sim:.3f})")
            if name.startswith("confidence"):
                checks.append((f"confidence sequence at β = {b}: ever ships at most δ", ex <= DELTA))
            if name.startswith("pointwise") and b == BAD_BETAS[0]:
                checks.append(("pointwise card read at every look ships a bad recipe more often than δ", ex > DELTA))
        lines.append("| " + " | ".join(cells) + " |")
    # the price: seeds needed and how often it ships, at good failure rates
    sup, strong = rules["confidence sequence (anytime card)"]
    u_sup, u_strong = rules["exact bound at δ·6/(π² j²) at the j-th look"]
    a59 = curtail_plan(N_FAMILY, EPS, DELTA).supported_max_k
    head2 = ["true failure rate", "confidence sequence: mean seeds", "P(release-supported by 200)",
             "P(strong-unsupported)", "union bound over looks: mean seeds / P(release-supported)",
             f"fixed N = {N_FAMILY} card: P(release-supported)"]
    lines2 = ["| " + " | ".join(head2) + " |", "|" + "---|" * len(head2)]
    for b in POWER_BETAS:
        ex = stop_probabilities(b, looks, sup, strong)
        un = stop_probabilities(b, looks, u_sup, u_strong)
        _, mean_sim = _simulate_peeking(rng, b, looks, sup, strong, sims)
        lines2.append(f"| {b:.2f} | {ex['mean_reruns']:.1f} ({mean_sim:.1f}) | {ex['p_supported']:.3f} | "
                      f"{ex['p_strong']:.3f} | {un['mean_reruns']:.1f} / {un['p_supported']:.3f} | "
                      f"{_ship_prob(N_FAMILY, b, a59):.3f} |")
    return "\n".join(lines), "\n".join(lines2), checks


def after_looking(sims: int, seed: int) -> bool:
    print("## Choosing after looking\n")
    print(f"### The best of M recipes (N = {N_FAMILY} reruns each; exact, simulated in brackets, "
          f"{sims} simulated families)\n")
    table_m, checks = best_of_m(sims, seed)
    print(table_m + "\n")
    print(f"### Adding seeds until it looks good (a look after every {BATCH} seeds, at most {MAX_SEEDS}; "
          f"anytime floor {anytime_sample_floor(EPS, DELTA)} seeds, fixed-N floor 22; exact, simulated in "
          f"brackets)\n")
    t1, t2, c2 = peeking(sims, seed + 1)
    print(t1 + "\n")
    print(t2 + "\n")
    ok = True
    for text, passed in checks + c2:
        ok &= bool(passed)
        print(f"{'PASS' if passed else 'FAIL'}: {text}")
    print()
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", type=int, default=20000, help="recipes at N = 59 (half as many at N = 120)")
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--quick", action="store_true", help="2,000 recipes: a smoke run")
    ap.add_argument("--sims", type=int, default=20000, help="simulated families and sweeps for the tables of "
                                                             "choosing after looking (default 20,000)")
    ap.add_argument("--only-after-looking", action="store_true",
                    help="only the tables of choosing after looking (the best of M, seeds added)")
    a = ap.parse_args()
    r59 = 2000 if a.quick else a.recipes
    t0 = time.perf_counter()
    if a.only_after_looking:
        ok = after_looking(2000 if a.quick else a.sims, a.seed + 11)
        print(f"({time.perf_counter() - t0:.0f} s)")
        return 0 if ok else 1
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
    ok &= after_looking(2000 if a.quick else a.sims, a.seed + 11)
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
