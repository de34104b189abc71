"""``recipe-audit bound``: the exact tail bound and verdict for k failures in N reruns (no store).

    recipe-audit bound --failures 6 --reruns 59 --json
    recipe-audit bound -k 2 -n 59 --family-size 10
"""

from __future__ import annotations

import argparse
import json

from recipe_audit.commands.args import audit_arguments, failures, family_or_anytime, reruns

#: The audit options a bound takes: its budget (ε, δ) and how it is read (M, anytime).
BOUND_OPTIONS = ("eps", "delta", "family_size", "anytime")


def register(subparsers) -> dict:
    b = subparsers.add_parser("bound", help="the exact tail bound and verdict for k failures in N reruns",
                              description="The one-sided exact (Clopper–Pearson) bounds U and L on the next "
                                          "rerun's failure probability, the sample floor N_min and the verdict, for "
                                          "k failures in N reruns. Counts go up to 10^15.")
    b.add_argument("--failures", "-k", type=failures, required=True, help="failed reruns k (0 <= k <= N)")
    b.add_argument("--reruns", "-n", type=reruns, required=True, help="reruns N (1 to 10^15)")
    # the budget's options as AuditOptions declares them, M and the anytime reading worded for a bound
    audit_arguments(b, BOUND_OPTIONS, help={
        "family_size": "the recipe was chosen from M recipe identities (a grid, the best of several): the family-wise "
                       "bounds at risk δ/M, floor and verdict lead (they hold whichever recipe was chosen; --json: "
                       "the top-level keys), the pointwise ones follow (--json: under 'pointwise')",
        "anytime": "the reruns come from a sweep that added seeds until the card looked good: the confidence "
                   "sequence's bounds U_n and L_n (valid at every N at once), floor and verdict lead (--json: the "
                   "top-level keys), the pointwise ones follow (--json: under 'pointwise')"})
    b.add_argument("--json", action="store_true", help="print one JSON object")
    return {"bound": cmd_bound}


def bounds_text(upper: float, lower: float, eps: float, verdict: str, u: str = "U", lo: str = "L") -> str:
    """``U = …, L = …`` printed so that neither reads on the other side of ε than the verdict says."""
    from recipe_audit.stats.exact import STRONG_UNSUPPORTED, SUPPORTED, shown_beside

    return (f"{u} = {shown_beside(upper, eps, above=verdict != SUPPORTED)}, "
            f"{lo} = {shown_beside(lower, eps, above=verdict == STRONG_UNSUPPORTED)}")



def cmd_bound(a: argparse.Namespace) -> int:
    # pure Python: no NumPy, SciPy or pandas to import
    from recipe_audit.stats.exact import SUPPORTED, tail_bound
    from recipe_audit.stats.options import check_budget

    family_or_anytime(a, "a bound")
    check_budget(a.eps, a.delta, a.family_size, a.anytime)
    tb = tail_bound(a.failures, a.reruns, a.eps, a.delta)
    pointwise = {"upper_bound": tb.upper, "lower_bound": tb.lower, "sample_floor": tb.sample_floor,
                 "verdict": tb.verdict, "more_clean_reruns_needed": tb.more_clean_reruns_needed}
    counts = {"failures": tb.k, "reruns": tb.n, "eps": tb.eps, "delta": tb.delta}
    more = tb.more_clean_reruns_needed
    pw_line = (f"upper bound {bounds_text(tb.upper, tb.lower, tb.eps, tb.verdict).replace(', L', ', lower bound L')}, "
               f"sample floor N_min = {tb.sample_floor}")
    if a.family_size is None and not a.anytime:
        out = {**pointwise, **counts}
        text = (f"  {pw_line}\n  verdict: {tb.verdict}"
                + (f" ({more} more clean reruns would make it release-supported)" if more else ""))
    elif a.family_size is not None:
        from recipe_audit.stats.family import family_tail_bound  # pure Python, like tail_bound

        fb = family_tail_bound(a.failures, a.reruns, a.eps, a.delta, a.family_size)
        # what was asked for leads: the family-wise reading at the top, the pointwise one beside it
        out = {"upper_bound": fb.upper, "lower_bound": fb.lower, "sample_floor": fb.sample_floor,
               "verdict": fb.verdict, "more_clean_reruns_needed": fb.more_clean_reruns_needed,
               **counts, "reading": "family-wise",
               "family": {"size": fb.family_size, "delta": fb.family_delta, "upper_bound": fb.upper,
                          "lower_bound": fb.lower, "sample_floor": fb.sample_floor, "verdict": fb.verdict,
                          "more_clean_reruns_needed": fb.more_clean_reruns_needed},
               "pointwise": pointwise}
        fmore = fb.more_clean_reruns_needed
        text = (f"  chosen from a family of M = {fb.family_size} recipes, each bounded at δ/M = {fb.family_delta:.4g}: "
                f"{bounds_text(fb.upper, fb.lower, tb.eps, fb.verdict)}, family-wise floor {fb.sample_floor}\n"
                f"  family-wise verdict: {fb.verdict}"
                + (f" ({fmore} more clean reruns would make it release-supported)"
                   if fmore and fb.verdict != SUPPORTED else "")
                + "; it holds whichever of the M recipes was chosen, the pointwise verdict below only "
                  "for a recipe fixed before the others were looked at\n")
    else:
        from recipe_audit.stats.anytime import ANYTIME_RULE, anytime_bound  # pure Python, like tail_bound

        ab = anytime_bound(a.failures, a.reruns, a.eps, a.delta)
        out = {"upper_bound": ab.upper, "lower_bound": ab.lower, "sample_floor": ab.sample_floor,
               "verdict": ab.verdict, **counts, "reading": "anytime",
               "anytime": {"upper_bound": ab.upper, "lower_bound": ab.lower, "sample_floor": ab.sample_floor,
                           "verdict": ab.verdict, "method": ab.method, "rule": ANYTIME_RULE},
               "pointwise": pointwise}
        text = (f"  read as an open-ended sweep (seeds added until the card looked good): confidence "
                f"sequence {bounds_text(ab.upper, ab.lower, tb.eps, ab.verdict, 'U_n', 'L_n')}, "
                f"anytime floor {ab.sample_floor}\n"
                f"  anytime verdict: {ab.verdict}; it holds however often the card was read, the pointwise "
                "verdict below only for an N fixed before the sweep\n")
    if a.family_size is not None or a.anytime:
        text += (f"  pointwise: {pw_line}\n  pointwise verdict: {tb.verdict}"
                 + (f" ({more} more clean reruns would make it release-supported)" if more else ""))
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{tb.k} failures in {tb.n} reruns, ε = {tb.eps}, δ = {tb.delta}:\n" + text)
    return 0

