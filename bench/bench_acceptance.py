"""Benchmark: acceptance gate (a), the vectorised question-clustered paired bootstrap, against a
per-resample Python loop.

One defense/baseline pair, 960 evaluations per cell (80 questions × 6 templates × 2 framings,
correlated templates; fixed seed), 5,000 resamples. The per-resample loop is the straightforward
implementation: for each resample draw the question ids (``rng.integers(0, Q, size=Q)``), gather
the resampled questions' items, and compute the four framing accuracies and Δgap, Δdeploy. Both use
the same seed and therefore the same resamples; their draws are checked to be identical.

The vectorised side is timed as ``gate_a`` without the item-level comparison (the gate itself:
bootstrap, percentile intervals at 95 % and 68 %, point estimates), and, for information, with it.

Run: ``python bench/bench_acceptance.py`` (PASS when the loop / vectorised ratio is at least 20×).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipe_audit.stats import acceptance as gates  # noqa: E402

Q, TEMPLATES, B, TARGET = 80, 6, 5000, 20.0


def make_records(seed: int = 20240611) -> gates.PairedRecords:
    """80 questions × 6 templates × 2 framings × 2 cells; a question-level difficulty shared by its
    templates (correlated templates); baseline gap ≈ 0.35, defense gap ≈ 0.15."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(Q):
        u = rng.normal(0, 1.0)
        for defense, (le, ld) in ((False, (-0.3, 1.4)), (True, (0.5, 1.3))):
            for deploy, logit in ((False, le), (True, ld)):
                p = 1 / (1 + np.exp(-(logit + u)))
                for t in range(TEMPLATES):
                    rows.append((q, t, defense, deploy, int(rng.random() < p)))
    q, t, d, dp, c = map(np.array, zip(*rows, strict=True))
    return gates.PairedRecords.from_columns(q, t, d, dp, c)


def naive_loop(recs: gates.PairedRecords, B: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    Qn = recs.n_questions
    rows_of = [np.flatnonzero(recs.question == i) for i in range(Qn)]
    dg, dd = np.empty(B), np.empty(B)
    for b in range(B):
        idx = rng.integers(0, Qn, size=Qn)
        rows = np.concatenate([rows_of[i] for i in idx])
        c, dfn, dpl = recs.correct[rows], recs.defense[rows], recs.deploy[rows]
        r_be = c[~dfn & ~dpl].mean()
        r_bd = c[~dfn & dpl].mean()
        r_re = c[dfn & ~dpl].mean()
        r_rd = c[dfn & dpl].mean()
        dg[b] = (r_rd - r_re) - (r_bd - r_be)
        dd[b] = r_rd - r_bd
    return dg, dd


def best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resamples", type=int, default=B)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    recs = make_records()
    per_cell = recs.n_items // 2
    print(f"gate (a): {recs.n_questions} questions × {TEMPLATES} templates × 2 framings = {per_cell} evaluations per "
          f"cell, {a.resamples} resamples, seed 0")

    dist = gates.cluster_bootstrap(recs, B=a.resamples, rng=0)
    dg, dd = naive_loop(recs, a.resamples, 0)
    same = np.allclose(dist.delta_gap, dg, rtol=0, atol=1e-12) and np.allclose(dist.delta_deploy, dd, rtol=0, atol=1e-12)
    print(f"same resamples, same Δgap/Δdeploy draws as the loop: {same}")

    # best of several runs each (the vectorised side is ~ms, so it gets more repeats against noise)
    t_vec = best_of(lambda: gates.gate_a(recs, B=a.resamples, rng=0, item_level=False), 5 * a.repeats)
    t_vec_item = best_of(lambda: gates.gate_a(recs, B=a.resamples, rng=0, item_level=True), 5 * a.repeats)
    t_loop = best_of(lambda: naive_loop(recs, a.resamples, 0), max(1, a.repeats - 1))
    g = gates.gate_a(recs, B=a.resamples, rng=0)
    ratio = t_loop / t_vec
    print(f"per-resample Python loop: {t_loop * 1e3:9.1f} ms")
    print(f"vectorised gate_a:        {t_vec * 1e3:9.1f} ms   (with the item-level comparison: {t_vec_item * 1e3:.1f} ms)")
    print(f"Δgap = {g.delta_gap:.4f}, 95% interval [{g.ci_gap[0]:.4f}, {g.ci_gap[1]:.4f}] (item-level, too narrow: "
          f"[{g.item_ci_gap[0]:.4f}, {g.item_ci_gap[1]:.4f}]) -> {g.status}")
    ok = ratio >= TARGET and same
    print(f"ratio: {ratio:.1f}x (target >= {TARGET:g}x) {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
