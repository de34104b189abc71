"""Benchmark: vectorised held-out split audit vs a straightforward per-split Python loop.

36 synthetic bimodal cells (N = 59 reruns each: a working mode and a collapsed mode, a few
unfinished reruns as NaN; fixed seed), 1,000 splits per cell, the 5 comparison rules of the card (docs/guide/statistics.md), audit part
floor(N/2) = 29, bootstrap B = 200 per split (B = 2,000 for the full-data decisions).

The per-split loop uses exactly the same splits (it regenerates the vectorised code's random split
draws from the same seed) and applies the same five rules by calling the public
``recipe_audit.stats.apply_rules`` on each audit part, with its own B = 200 bootstrap draw per split
(the vectorised audit instead shares one set of resample indices per cell and finished count, see
``recipe_audit.stats.split_audit``). The loop is timed on the first ``--loop-splits`` splits of every
cell (default 100) and extrapolated linearly to 1,000; its non-bootstrap decisions are checked to be
identical to the vectorised ones on those splits.

Run: ``python bench/bench_split_audit.py``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipe_audit.stats import RULES, apply_rules, held_out_split_audit  # noqa: E402
from recipe_audit.stats.rules import failure_mask  # noqa: E402

N_CELLS = 36
N_RERUNS = 59
EPS = 0.10
DELTA = 0.10


def make_cells(seed: int = 20240611) -> list[tuple[np.ndarray, float]]:
    """Bimodal cells: working mode ~ N(0.82, 0.03), collapsed mode ~ N(0.52, 0.01), some NaN."""
    rng = np.random.default_rng(seed)
    cells = []
    for i in range(N_CELLS):
        collapse_p = [0.0, 0.03, 0.08, 0.15, 0.25, 0.4][i % 6]
        works = rng.normal(0.82, 0.03, N_RERUNS)
        collapsed = rng.normal(0.52, 0.01, N_RERUNS)
        x = np.where(rng.random(N_RERUNS) < collapse_p, collapsed, works)
        x[rng.random(N_RERUNS) < 0.02] = np.nan  # unfinished reruns
        tau = [0.70, 0.75, 0.78][i % 3]
        cells.append((x, tau))
    return cells


def _sync_bootstrap_draws(x: np.ndarray, u: np.ndarray, n_audit: int, audit_B: int, rng) -> None:
    """Consume the bootstrap-index draws the vectorised audit makes, so later cells see the same splits."""
    audit = np.sort(np.argsort(u, axis=1)[:, :n_audit], axis=1)
    counts = np.isfinite(x[audit]).sum(axis=1)
    for c in np.unique(counts):
        if c > 0:
            rng.integers(0, int(c), size=(audit_B, int(c)))


def loop_audit(cells, n_splits: int, loop_splits: int, seed: int, audit_B: int, B: int):
    """Straightforward per-split loop over the first ``loop_splits`` of the same splits.

    Returns pooled ship/violation counts, per-cell (5, loop_splits) decisions, the time spent on the
    full-data decisions and the time spent in the per-split loop (bookkeeping that only keeps the
    random stream in step with the vectorised audit is not timed).
    """
    rng = np.random.default_rng(seed)
    boot_rng = np.random.default_rng(seed + 1)
    ships = np.zeros(len(RULES), dtype=np.int64)
    viols = np.zeros(len(RULES), dtype=np.int64)
    decisions = []
    t_full = t_splits = 0.0
    for x, tau in cells:
        n = x.size
        n_audit = n // 2
        fail = failure_mask(x, tau)
        t0 = time.perf_counter()
        apply_rules(x, tau, eps=EPS, delta=DELTA, B=B, rng=rng)  # full data (same rng use as the audit)
        t_full += time.perf_counter() - t0
        u = rng.random((n_splits, n))
        _sync_bootstrap_draws(x, u, n_audit, audit_B, rng)
        cell_dec = []
        t0 = time.perf_counter()
        for s in range(loop_splits):
            order = np.argsort(u[s])
            audit_idx = np.sort(order[:n_audit])
            held_idx = order[n_audit:]
            dec = apply_rules(x[audit_idx], tau, eps=EPS, delta=DELTA, B=audit_B, rng=boot_rng)
            held_frac = fail[held_idx].mean()
            for j, rule in enumerate(RULES):
                if dec.ships[rule]:
                    ships[j] += 1
                    viols[j] += held_frac > EPS
            cell_dec.append([dec.ships[r] for r in RULES])
        t_splits += time.perf_counter() - t0
        decisions.append(np.array(cell_dec, dtype=bool).T)
    return ships, viols, decisions, t_full, t_splits


def vectorised_decisions(cells, n_splits, seed, audit_B, B):
    """Per-cell (5, S) decisions of the vectorised core, for the agreement check (not timed)."""
    from recipe_audit.stats.bounds import sample_floor
    from recipe_audit.stats.split_audit import _draw_audit_parts, _rules_on_rows

    rng = np.random.default_rng(seed)
    out = []
    for x, tau in cells:
        xx = np.where(np.isfinite(x), x, np.nan)
        fail = failure_mask(xx, tau)
        apply_rules(xx, tau, eps=EPS, delta=DELTA, B=B, rng=rng)
        audit, k_audit, _ = _draw_audit_parts(xx, fail, xx.size // 2, n_splits, rng)
        out.append(
            _rules_on_rows(audit, k_audit, tau, EPS, DELTA, sample_floor(EPS, DELTA), audit_B, True, rng)
        )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--splits", type=int, default=1000)
    p.add_argument("--loop-splits", type=int, default=100)
    p.add_argument("--audit-B", type=int, default=200)
    p.add_argument("--B", type=int, default=2000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--repeats", type=int, default=3, help="vectorised timing: best of this many runs")
    args = p.parse_args(argv)
    loop_splits = min(args.loop_splits, args.splits)

    cells = make_cells()
    held_out_split_audit(cells[:2], EPS, DELTA, n_splits=10, rng=0)  # warm-up (imports, caches)

    vec_times = []
    for _ in range(max(1, args.repeats)):
        t0 = time.perf_counter()
        result = held_out_split_audit(
            cells, EPS, DELTA, n_splits=args.splits, rng=args.seed, B=args.B, audit_B=args.audit_B
        )
        vec_times.append(time.perf_counter() - t0)
    t_vec = min(vec_times)

    l_ships, l_viols, l_dec, t_full, t_splits = loop_audit(
        cells, args.splits, loop_splits, args.seed, args.audit_B, args.B
    )
    t_loop = t_full + t_splits * args.splits / loop_splits

    v_dec = vectorised_decisions(cells, args.splits, args.seed, args.audit_B, args.B)
    same = all(
        np.array_equal(v[j, :loop_splits], lp[j])
        for v, lp in zip(v_dec, l_dec, strict=True)
        for j, r in enumerate(RULES)
        if r != "bootstrap"
    )

    print(
        f"cells: {N_CELLS} x N={N_RERUNS}, splits per cell: {args.splits}, rules: {len(RULES)}, "
        f"audit size: floor(N/2), bootstrap B={args.audit_B} per split, B={args.B} on full data"
    )
    print(f"rule            P(viol|ship) vectorised            | loop on first {loop_splits} splits")
    for j, ra in enumerate(result.rules):
        p_vec = "n/a" if ra.p_violation_given_ship is None else f"{ra.p_violation_given_ship:.3f}"
        p_loop = "n/a" if not l_ships[j] else f"{l_viols[j] / l_ships[j]:.3f}"
        print(
            f"  {ra.rule:<15} {p_vec:>6} ({ra.split_violations:>5}/{ra.split_ships:>5})"
            f"  full-data ships {ra.cells_shipped_full:>2}, over budget {ra.cells_shipped_full_over_budget:>2}"
            f" | {p_loop:>6} ({l_viols[j]}/{l_ships[j]})"
        )
    print(
        f"non-bootstrap decisions identical on the looped splits: {same} (the loop calls apply_rules per "
        f"split with its own B={args.audit_B} bootstrap draw; the vectorised audit shares resample indices "
        "per cell and finished count)"
    )
    extrap = f" (extrapolated from {loop_splits} splits)" if loop_splits < args.splits else ""
    ratio = t_loop / t_vec
    print(
        f"split audit: vectorised {t_vec:.2f} s, per-split loop {t_loop:.1f} s{extrap} "
        f"-> {ratio:.0f}x faster (target >= 20x)"
    )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
