"""Compute saved by curtailment (docs/guide/stop-early.md): reruns a curtailing sweep launches vs the planned N.

For each true rerun failure probability p in {0, 0.05, 0.1, 0.2, 0.3, 0.5}, 20,000 simulated
sweeps of N = 59 planned reruns (each failing independently with probability p) are curtailed
after every batch (``recipe_audit.stats.simulate_curtailment``, the rule the curtailing sweeper
applies: ``hydra/sweeper=curtail``); the table gives the mean reruns launched (10/50/90 %
quantiles), as a share of N, the share of sweeps that stopped early, and how often the curtailed
release decision / verdict equals the full sweep's on the same outcomes.

Settings: ε = δ = 0.10 (the audit defaults) with batches of 1, 4 (the sweeper's default) and 8,
stopping on the release decision at N (``stop_on: decision``, the default) and on the exact
verdict (``stop_on: verdict``); and ε = δ = 0.05 (the design point of N = 59) with batches of 4.

Target: at p = 0.3, N = 59, the default sweeper launches on average at most a quarter of the
reruns. Run: ``python bench/bench_curtail.py`` (a few seconds).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipe_audit.stats import curtail_plan, simulate_curtailment  # noqa: E402

RATES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)
N = 59


def rows(eps: float, delta: float, batch: int, stop_on: str, sims: int, seed: int):
    for i, p in enumerate(RATES):
        yield simulate_curtailment(p, N, eps=eps, delta=delta, batch_size=batch, stop_on=stop_on,
                                   n_sims=sims, rng=seed + i)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=59)
    a = ap.parse_args()
    head = ("| failure rate p | batch | stop on | mean reruns used (of 59) | 10/50/90 % | share of N | stopped early "
            "| decision = full sweep | verdict = full sweep |")
    verdict = None
    for eps, delta, settings in ((0.10, 0.10, [(4, "decision"), (1, "decision"), (8, "decision"), (4, "verdict")]),
                                 (0.05, 0.05, [(4, "decision")])):
        plan = curtail_plan(N, eps, delta)
        print(f"\n### ε = δ = {eps}: release-supported at N = {N} allows at most {plan.supported_max_k} failures, "
              f"strong-unsupported from {plan.strong_min_k}\n")
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for batch, stop_on in settings:
            for s in rows(eps, delta, batch, stop_on, a.sims, a.seed):
                q = "/".join(f"{x:g}" for x in s.quantiles_used)
                print(f"| {s.failure_prob:g} | {batch} | {stop_on} | {s.mean_used:.1f} | {q} | "
                      f"{s.fraction_of_planned:.2f} | {s.stopped_early:.2f} | {s.decision_agrees:.3f} | "
                      f"{s.verdict_agrees:.3f} |")
                if (eps, batch, stop_on, s.failure_prob) == (0.10, 4, "decision", 0.3):
                    verdict = s
    ok = verdict.fraction_of_planned <= 0.25
    print(f"\n{'PASS' if ok else 'FAIL'}: at p = 0.3, N = 59 (ε = δ = 0.1, batches of 4, stop on the decision) the "
          f"curtailing sweep launches {verdict.mean_used:.1f} reruns on average = {verdict.fraction_of_planned:.3f} "
          f"of N (target ≤ 0.25); its release decision equals the full sweep's in "
          f"{verdict.decision_agrees:.0%} of {verdict.n_sims} sweeps.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
