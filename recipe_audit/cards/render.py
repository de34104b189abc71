"""Card rendering: Markdown for people, figures for the eye. Plots return a ``Figure``; only
``cards.store`` writes to disk or MLflow."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from .. import stats

RULE_LABELS = OrderedDict([
    ("mean", "mean ≥ τ"),
    ("median", "median ≥ τ"),
    ("bootstrap", "bootstrap 10th pct of mean ≥ τ"),
    ("mean_minus_2sd", "mean − 2·sd ≥ τ"),
    ("card", "recipe card (U ≤ ε, N ≥ N_min)"),
])


def _f(x: Any, nd: int = 3) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def cell_groups(doc: dict[str, Any]) -> OrderedDict[tuple, list[dict]]:
    """Entries grouped by cell (recipe, group, audit set), in document order."""
    out: OrderedDict[tuple, list[dict]] = OrderedDict()
    for e in doc["cells"]:
        key = (e["recipe_id"], tuple(sorted(e["group"].items())), e["audit_set"], e["metric"])
        out.setdefault(key, []).append(e)
    return out


def verdict_table(doc: dict[str, Any]) -> list[list[str]]:
    """Rows of the grid (cells × τ): cell, τ, failures/N, U, verdict, what the mean rule says."""
    rows = []
    for e in doc["cells"]:
        k = "—" if e["n_failures"] is None else str(e["n_failures"])
        rows.append([e["label"], e["audit_set"] or e["metric"], f"{e['tau']:g}", f"{k}/{e['n_reruns']}",
                     _f(e["upper_bound"]), e["verdict"],
                     "ships" if e["rules"]["mean"] else "holds"])
    return rows


GRID_HEADER = ["cell", "audit", "τ", "failures/N", "U", "verdict", "mean rule"]


def text_table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def to_markdown(doc: dict[str, Any], images: dict[tuple, str] | None = None) -> str:
    """The card for people: the grid (when several cells or τ), then each cell in full."""
    opts, src = doc["options"], doc["source"]
    lines = [
        "# Recipe card",
        "",
        f"Experiment `{src.get('experiment')}` · metric `{src.get('metric')}` "
        f"({'higher' if opts['higher_is_better'] else 'lower'} is better) · "
        f"ε = {opts['eps']} · δ = {opts['delta']} · unfinished reruns: "
        f"{'counted as failures' if opts['unfinished'] == 'fail' else 'refuse the card'}",
        "",
        "The bound U is the exact one-sided Clopper–Pearson upper bound, at confidence 1 − δ, on the "
        "probability that the **next** rerun of the recipe fails the bar τ. A recipe is "
        "release-supported only when U ≤ ε and N ≥ N_min.",
        "",
    ]
    groups = cell_groups(doc)
    if len(doc["cells"]) > 1:
        lines += ["## Verdicts", "", _md_table(GRID_HEADER, verdict_table(doc)), ""]
    for key, entries in groups.items():
        first = entries[0]
        lines += [f"## {first['label']} — audit `{first['audit_set'] or first['metric']}`", ""]
        if first["recipe_summary"]:
            lines += [f"Recipe: {first['recipe_summary']}", ""]
        if first["recipe_id"]:
            lines += [f"Recipe identity: `{first['recipe_id']}` · reruns digest `{first['digest'][:16]}`", ""]
        if first["verdict"] == stats.REFUSED_SHIFT:
            lines += [f"**Verdict: `{stats.REFUSED_SHIFT}`** — {first['reason']}", ""]
            continue
        if images and key in images:
            lines += [f"![rerun histogram]({images[key]})", ""]
        rows = []
        for e in entries:
            rows.append([f"{e['tau']:g}", f"{e['n_failures']}/{e['n_reruns']}", _f(e["lower_bound"]),
                         _f(e["upper_bound"]), str(e["sample_floor"]), f"**{e['verdict']}**"])
        lines += [_md_table(["τ", "failures/N", "L", "U", "N_min", "verdict"], rows), ""]
        for e in entries:
            lines += [f"- τ = {e['tau']:g}: {e['reason']}"]
        lines += ["", "What common practice would have decided on the same reruns "
                  f"(the practice rules see only the {first['rule_statistics']['n_finished']} finished "
                  f"reruns and ignore {first['rule_statistics']['n_ignored_by_practice_rules']}):", ""]
        st = first["rule_statistics"]
        stat_of = {"mean": st["mean"], "median": st["median"], "bootstrap": st["bootstrap_limit"],
                   "mean_minus_2sd": st["two_sd_limit"], "card": None}
        header = ["rule", "statistic"] + [f"τ = {e['tau']:g}" for e in entries]
        rrows = []
        for rule, label in RULE_LABELS.items():
            stat = _f(stat_of[rule]) if rule != "card" else "U = " + ", ".join(_f(e["upper_bound"]) for e in entries)
            rrows.append([label, stat] + ["ships" if e["rules"][rule] else "does not ship" for e in entries])
        lines += [_md_table(header, rrows), ""]
        if first["unfinished"]:
            lines += [f"Unfinished reruns ({len(first['unfinished'])}, counted as failures): "
                      + ", ".join(f"seed {u['seed']} ({u['reason']})" for u in first["unfinished"]), ""]
        if first["duplicates"]:
            dis = [d for d in first["duplicates"] if d["disagree"]]
            lines += [f"Seeds run more than once: {len(first['duplicates'])} (one result per seed used)"
                      + (f"; **{len(dis)} disagree (non-deterministic training)**: seeds "
                         + ", ".join(str(d["seed"]) for d in dis) if dis else "") + ".", ""]
    if doc.get("split_audit"):
        lines += ["## Held-out split audit (SPEC 1.8)", "", _split_audit_md(doc["split_audit"]), ""]
    lines += [f"---\nCard digest `{doc['digest']}` · created {doc['created']} · "
              + ", ".join(f"{k} {v}" for k, v in doc["software"].items())]
    return "\n".join(lines) + "\n"


def _split_audit_md(sa: dict[str, Any]) -> str:
    rows = []
    for r in sa["rules"].values():
        p = r["p_violation_given_ship"]
        rows.append([RULE_LABELS.get(r["rule"], r["rule"]), str(r["cells_shipped_full"]),
                     str(r["cells_shipped_full_over_budget"]),
                     f"{r['split_violations']}/{r['split_ships']}", "—" if p is None else f"{p:.3f}"])
    head = (f"{sa['n_cells']} cell(s) × {sa['n_splits']} random splits, audit part of "
            f"{sa['audit_size']} reruns, the rest held out.\n\n")
    return head + _md_table(["rule", "cells shipped (full data)", "… of which k/N > ε",
                             "violations/ships on splits", "P(violation | ship)"], rows)


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------


def histogram(entries: list[dict[str, Any]]):
    """Histogram of one cell's rerun metrics: every τ asked, the mean, and the failures (at the
    first τ) in another colour; unfinished reruns are counted in the title. Bimodal reruns show
    a working mode, a collapsed mode, and the mean in the empty valley between them."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    e0 = entries[0]
    vals = np.array([r["value"] for r in e0["reruns"] if r["value"] is not None], dtype=float)
    fig = Figure(figsize=(7, 3.6), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    tau = e0["tau"]
    fails = vals < tau if e0["higher_is_better"] else vals > tau
    lo = min(vals.min(initial=tau), tau) - 0.02
    hi = max(vals.max(initial=tau), tau) + 0.02
    bins = np.linspace(lo, hi, 41)
    ax.hist([vals[~fails], vals[fails]], bins=bins, stacked=True, color=["#3b7dd8", "#d84a3b"],
            label=[f"pass τ = {tau:g}", f"fail ({int(fails.sum())})"])
    for e in entries:
        ax.axvline(e["tau"], color="black", ls="--", lw=1.2)
        ax.text(e["tau"], ax.get_ylim()[1] * 0.95, f" τ={e['tau']:g}", va="top", fontsize=8)
    if vals.size:
        ax.axvline(vals.mean(), color="#e0a100", lw=2, label=f"mean {vals.mean():.3f}")
    n_unf = e0["n_unfinished"]
    ax.set_xlabel(e0["metric"])
    ax.set_ylabel("reruns")
    ax.set_title(f"{e0['label']}: {len(vals)} finished reruns"
                 + (f", {n_unf} unfinished (failures)" if n_unf else "")
                 + f" — {e0['verdict']} (U = {_f(e0['upper_bound'])})", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def responsiveness_plot(resp: dict[str, Any]):
    """Fraction of splits each rule ships, against the audit size N′ (SPEC 1.8)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 3.6), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    sizes = resp["sizes"]
    for rule, label in RULE_LABELS.items():
        ys = resp["ship_fraction"][rule]
        ax.plot(sizes, [np.nan if y is None else y for y in ys], marker="o", ms=3, label=label)
    ax.axvline(resp["sample_floor"], color="grey", ls=":", label=f"N_min = {resp['sample_floor']}")
    ax.set_xlabel("audit size N′")
    ax.set_ylabel("fraction of splits that ship")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
