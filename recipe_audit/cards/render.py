"""Card rendering: Markdown for people, figures for the eye, from the typed card
(:class:`~recipe_audit.cards.document.RecipeCard`). Plots return a ``Figure``; only
``cards.files`` writes to disk, ``store.cards`` to MLflow."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import numpy as np

from recipe_audit import stats
from recipe_audit.cards.tables import md_table
from recipe_audit.stats.exact import shown_beside

if TYPE_CHECKING:
    from recipe_audit.cards.document import CardEntry, RecipeCard

RULE_LABELS = OrderedDict([
    ("mean", "mean ≥ τ"),
    ("median", "median ≥ τ"),
    ("bootstrap", "bootstrap 10th pct of mean ≥ τ"),
    ("mean_minus_2sd", "mean − 2·sd ≥ τ"),
    ("card", "recipe card (U ≤ ε, N ≥ N_min)"),
])


def _f(x: Any, nd: int = 3) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def cell_groups(doc: RecipeCard) -> OrderedDict[tuple, list[CardEntry]]:
    """Entries grouped by cell (recipe, group, audit set), in document order."""
    out: OrderedDict[tuple, list[CardEntry]] = OrderedDict()
    for e in doc.cells:
        key = (e.recipe_id, tuple(sorted(e.group.items())), e.audit_set, e.metric)
        out.setdefault(key, []).append(e)
    return out


def shown_u(upper: float | None, eps: float, verdict: str) -> str:
    """U to three decimals beside its verdict, with more where three would read on the wrong side
    of ε (``0.1004`` beside ``unsupported`` at ε = 0.1, not ``0.100``)."""
    if upper is None:
        return "—"
    return shown_beside(upper, eps, above=verdict != stats.SUPPORTED, digits=3, fixed=True)


def shown_l(lower: float | None, eps: float, verdict: str) -> str:
    """L to three decimals beside its verdict (more where three would read on the wrong side of ε)."""
    if lower is None:
        return "—"
    return shown_beside(lower, eps, above=verdict == stats.STRONG_UNSUPPORTED, digits=3, fixed=True)


def _pointwise_verdict(e: CardEntry) -> str:
    """The entry's fixed-N verdict: its ``pointwise`` one where another reading leads it."""
    return (e.pointwise or {}).get("verdict") or e.verdict


def pointwise_led(doc: RecipeCard) -> bool:
    """Whether a family-wise reading the user asked for leads the entries (their pointwise values
    then sit under ``pointwise``)."""
    return any(e.family and e.pointwise for e in doc.cells)


def verdict_table(doc: RecipeCard) -> list[list[str]]:
    """Rows of the grid (cells × τ): cell, τ, failures/N, U, verdict, whether the mean rule ships.
    The pointwise readings: an entry led by a family-wise reading shows its ``pointwise`` values
    here (the family-wise ones have their own table above)."""
    rows = []
    for e in doc.cells:
        k = "—" if e.n_failures is None else str(e.n_failures)
        pw = e.pointwise if e.family and e.pointwise else {}
        u, v = pw.get("upper_bound", e.upper_bound), pw.get("verdict", e.verdict)
        rows.append([e.label, e.audit_set or e.metric, f"{e.tau:g}",
                     f"{k}/{e.n_reruns}" + _planned_suffix(e) + never_ran_suffix(e), shown_u(u, e.eps, v), v,
                     ships(e.rules["mean"])])
    return rows


GRID_HEADER = ["cell", "audit", "τ", "failures/N", "U", "verdict", "mean ≥ τ"]


def ships(decision: bool) -> str:
    """A rule's decision in the card's words (terminal, Markdown, HTML alike)."""
    return "ships" if decision else "does not ship"


def rules_table(entries: list[CardEntry]) -> tuple[list[str], list[list[str]]]:
    """What every rule decides on one cell's reruns, one column per τ: (header, rows)."""
    st = entries[0].rule_statistics
    stat_of = {"mean": st.mean, "median": st.median, "bootstrap": st.bootstrap_limit,
               "mean_minus_2sd": st.two_sd_limit, "card": None}
    header = ["rule", "statistic"] + [f"ships at τ = {e.tau:g}?" for e in entries]
    rows = []
    for rule, label in RULE_LABELS.items():
        stat = _f(stat_of[rule]) if rule != "card" else "U = " + ", ".join(
            shown_u(e.upper_bound, e.eps, e.verdict) for e in entries)
        rows.append([label, stat] + [ships(e.rules[rule]) for e in entries])
    return header, rows


def to_markdown(doc: RecipeCard, images: dict[tuple, str] | None = None,
                band_images: dict[tuple, str] | None = None) -> str:
    """The card for people: the grid (when several cells or τ), then each cell in full."""
    opts, src = doc.options, doc.source
    # a card of a table of runs (recipe_audit.card_from_runs) has no experiment: say where it is from
    where = ("Runs from a table (no tracking store)" if src.get("experiment") is None
             else f"Experiment `{src.get('experiment')}`")
    lines = [
        "# Recipe card",
        "",
        f"{where} · metric `{src.get('metric')}` "
        f"({'higher' if opts['higher_is_better'] else 'lower'} is better) · "
        f"ε = {opts['eps']} · δ = {opts['delta']} · unfinished reruns: "
        f"{'counted as failures' if opts['unfinished'] == 'fail' else 'refuse the card'}",
        "",
        "The bound U is the exact one-sided Clopper–Pearson upper bound, at confidence 1 − δ, on the "
        "probability that the **next** rerun of the recipe fails the bar τ. A recipe is "
        "release-supported only when U ≤ ε and N ≥ N_min.",
        "",
    ]
    from recipe_audit.cards.anytime import markdown_lines as anytime_lines
    from recipe_audit.cards.family import lead_lines as family_lines

    lines += anytime_lines(doc) + family_lines(doc, markdown=True)  # the readings that lead, when they apply
    groups = cell_groups(doc)
    if len(doc.cells) > 1:
        heading = "## Pointwise verdicts" if pointwise_led(doc) else "## Verdicts"
        lines += [heading, "", md_table(GRID_HEADER, verdict_table(doc)), ""]
    for key, entries in groups.items():
        first = entries[0]
        lines += [f"## {first.label} — audit `{first.audit_set or first.metric}`", ""]
        if first.recipe_summary:
            lines += [f"Recipe: {first.recipe_summary}", ""]
        if first.recipe_id:
            lines += [f"Recipe identity: `{first.recipe_id}` · reruns digest `{first.digest[:16]}`", ""]
        if first.verdict == stats.REFUSED_SHIFT:
            lines += [f"**Verdict: `{stats.REFUSED_SHIFT}`** — {first.reason}", ""]
            continue
        if images and key in images:
            lines += [f"![rerun histogram]({images[key]})", ""]
        rows = []
        for e in entries:
            rows.append([f"{e.tau:g}", f"{e.n_failures}/{e.n_reruns}" + never_ran_suffix(e), shown_l(e.lower_bound, e.eps, e.verdict),
                         shown_u(e.upper_bound, e.eps, e.verdict), str(e.sample_floor), f"**{e.verdict}**"])
        lines += [md_table(["τ", "failures/N", "L", "U", "N_min", "verdict"], rows), ""]
        for e in entries:
            lines += [f"- τ = {e.tau:g}: {e.reason}"]
        lines += _curtailment_md(first) + _band_md(entries, (band_images or {}).get(key))
        lines += ["", "What common practice would have decided on the same reruns "
                  f"(the practice rules see only the {first.rule_statistics.n_finished} finished "
                  f"reruns and ignore {first.rule_statistics.n_ignored_by_practice_rules}):", ""]
        lines += [md_table(*rules_table(entries)), ""]
        if first.never_ran:
            lines += ["**" + never_ran_sentence(first) + "**", ""]
        if first.unfinished:
            lines += [f"Unfinished reruns ({len(first.unfinished)}, counted as failures): "
                      + ", ".join(f"seed {u.seed} ({u.reason})" for u in first.unfinished), ""]
        if first.duplicates:
            lines += _duplicates_md(entries)
    if doc.shift:
        from recipe_audit.cards.shift import shift_markdown

        lines += shift_markdown(doc.shift, doc.options.get("eps"))
    if doc.split_audit:
        lines += ["## Held-out split audit", "", _split_audit_md(doc.split_audit), ""]
    from recipe_audit.cards.digest import content_digest

    lines += [f"---\nCard content digest `{doc.content_digest or content_digest(doc.to_json())}` (the card "
              "digest in the JSON also covers this file and the plots) · created "
              f"{doc.created} · " + ", ".join(f"{k} {v}" for k, v in doc.software.items())]
    return "\n".join(lines) + "\n"


def _duplicates_md(entries: list[CardEntry]) -> list[str]:
    """The seeds run more than once, in words: a re-run seed is another draw, not a second chance,
    so it counts its worst finished result; the seeds whose results disagree about a bar are named."""
    dups = entries[0].duplicates
    lines = [f"Seeds run more than once: {len(dups)}. A rerun of a seed is another draw from the recipe, "
             "not a second chance: each seed counts its worst finished result, so it fails a bar when any "
             "of its finished reruns fails it (a killed or crashed attempt followed by a finished rerun "
             "counts the finished one)."]
    for d in dups:
        vals = [_f(v) for v, ok in zip(d.values, d.results or [], strict=False) if ok]
        run = str(d.decided_by or "")[:12]
        disagree_at = [f"{e.tau:g}" for e in entries
                       if any(x.seed == d.seed and x.disagree for x in e.duplicates)]
        if not d.has("results"):  # a card of an earlier version: its own words
            if d.disagree:
                lines.append(f"- Seed {d.seed}: its finished reruns logged different values.")
            continue
        if disagree_at:
            lines.append(f"- **Seed {d.seed}** finished {len(vals)} times ({', '.join(vals)}); at "
                         f"τ = {', '.join(disagree_at)} its reruns disagree about the bar, so it counts as "
                         f"**failing**, decided by run `{run}` ({_f(d.counted_value)}).")
        elif len(vals) > 1:
            extra = " (non-deterministic training)" if d.nondeterministic else ""
            lines.append(f"- Seed {d.seed} finished {len(vals)} times ({', '.join(vals)}){extra}; it counts "
                         f"{_f(d.counted_value)} (run `{run}`), and its reruns agree about every bar on "
                         "this card.")
        elif len(vals) == 1:
            lines.append(f"- Seed {d.seed}: {len(d.run_ids) - 1} other attempt(s) gave no result (crashed, "
                         f"killed, still running or no metric logged); its finished rerun counts ({vals[0]}, "
                         f"run `{run}`).")
        else:
            lines.append(f"- Seed {d.seed}: none of its {len(d.run_ids)} runs finished with a result; it "
                         f"counts as unfinished (run `{run}`).")
    return [*lines, ""]


def _split_audit_md(split: dict[str, Any]) -> str:
    rows = []
    for r in split["rules"].values():
        p = r["p_violation_given_ship"]
        rows.append([RULE_LABELS.get(r["rule"], r["rule"]), str(r["cells_shipped_full"]),
                     str(r["cells_shipped_full_over_budget"]),
                     f"{r['split_violations']}/{r['split_ships']}", "—" if p is None else f"{p:.3f}"])
    head = (f"{split['n_cells']} cell(s) × {split['n_splits']} random splits, audit part of "
            f"{split['audit_size']} reruns, the rest held out.\n\n")
    return head + md_table(["rule", "cells shipped (full data)", "… of which k/N > ε",
                             "violations/ships on splits", "P(violation | ship)"], rows)


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------


def histogram(entries: list[CardEntry]):
    """Histogram of one cell's rerun metrics: every τ asked, the mean, and the failures (at the
    first τ) in another colour; unfinished reruns are counted in the title. Bimodal reruns show
    a working mode, a collapsed mode, and the mean in the empty valley between them."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    e0 = entries[0]
    vals = np.array([r.value for r in e0.reruns if r.value is not None], dtype=float)
    fig = Figure(figsize=(7, 3.6), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    tau = e0.tau
    fails = vals < tau if e0.higher_is_better else vals > tau
    lo = min(vals.min(initial=tau), tau) - 0.02
    hi = max(vals.max(initial=tau), tau) + 0.02
    bins = np.linspace(lo, hi, 41)
    ax.hist([vals[~fails], vals[fails]], bins=bins, stacked=True, color=["#3b7dd8", "#d84a3b"],
            label=[f"pass τ = {tau:g}", f"fail ({int(fails.sum())})"])
    for e in entries:
        ax.axvline(e.tau, color="black", ls="--", lw=1.2)
        ax.text(e.tau, ax.get_ylim()[1] * 0.95, f" τ={e.tau:g}", va="top", fontsize=8)
    if vals.size:
        ax.axvline(vals.mean(), color="#e0a100", lw=2, label=f"mean {vals.mean():.3f}")
    n_unf = e0.n_unfinished
    ax.set_xlabel(e0.metric)
    ax.set_ylabel("reruns")
    ax.set_title(f"{e0.label}: {len(vals)} finished reruns"
                 + (f", {n_unf} unfinished (failures)" if n_unf else "")
                 + f" — {e0.verdict} (U = {shown_u(e0.upper_bound, e0.eps, e0.verdict)})", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def responsiveness_plot(resp: dict[str, Any]):
    """Fraction of splits each rule ships, against the audit size N′."""
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


# ---------------------------------------------------------------------------------------------
# Curtailed sweeps and the simultaneous band
# ---------------------------------------------------------------------------------------------


def never_ran_suffix(e: CardEntry) -> str:
    """`` (53 never ran)`` beside failures/N when planned reruns never started, else nothing."""
    return f" ({e.never_ran} never ran)" if e.never_ran else ""


def never_ran_sentence(e: CardEntry) -> str:
    """What a card with planned reruns that never started says of them: how many failed, how
    many of those never ran, and what runs them."""
    return (f"{e.n_failures} of {e.n_reruns} reruns failed at τ = {e.tau:g}, {e.never_ran} of them planned "
            "reruns that never ran (the sweep stopped before them: counted as failures). Relaunch the "
            "sweep's command with resume=true (tracking.resume=true in the built-in trainer, "
            "hydra.callbacks.recipe_audit.resume=true in your own app) to run them; the seeds that "
            "finished are kept.")


def _planned_suffix(e: CardEntry) -> str:
    cur = e.curtailment
    return f" (N = {cur.n_planned} planned)" if cur and cur.stopped_early else ""


def _curtailment_md(e: CardEntry) -> list[str]:
    """The paragraph on where a curtailing sweep stopped and why."""
    cur = e.curtailment
    if not cur:
        return []
    how = (f"in batches of {cur.batch_size}, " if cur.batch_size else "") + (
        "stopping once the release decision at N was settled" if cur.stop_on == "decision"
        else "stopping once the verdict at N was settled")
    if not cur.stopped_early:
        return ["", f"**Curtailing sweep:** all {cur.n_planned} planned reruns ran ({how}): "
                "the verdict was not settled earlier, so this is the ordinary card.", ""]
    return ["", f"**Curtailed sweep:** {cur.n_launched} of the {cur.n_planned} planned reruns were "
            f"launched ({how}). Why it stopped: {cur.sweep_reason} The {cur.remaining} seeds it never "
            "launched are not unfinished reruns; the card states the verdict at the planned N, with "
            "U = U(k + r, N) counting the r unlaunched reruns as failing (valid whatever they would have "
            "done) and L = L(k, N). Verdicts still possible at N: "
            + ", ".join(f"`{v}`" for v in cur.possible_verdicts) + ".", ""]


def _band_md(entries: list[CardEntry], image: str | None) -> list[str]:
    """The simultaneous band: per-τ bounds beside the pointwise ones, its floor, what it certifies."""
    bands = [e.band for e in entries]
    if not all(bands):
        return []
    b, e0 = bands[0], entries[0]
    const = (f", c = {b.c:.4f}" if b.c is not None else "") + (
        f", local level α = {b.local_level:.2e}" if b.local_level is not None else "")
    cov = f"; exact coverage {b.coverage:.4f} for a continuous metric" if b.coverage is not None else ""
    extra = (f" (at the planned N = {b.n}, the {b.n_unlaunched_counted_as_failures} unlaunched reruns "
             "counted as failing)" if b.n_unlaunched_counted_as_failures else "")
    lines = ["", "### Every τ at once (simultaneous band)", "",
             f"With confidence 1 − δ = {1 - b.delta:.0%}, **simultaneously for every bar τ**, the probability "
             "that the next rerun fails τ is at most the band's bound, so τ may be chosen after looking at the "
             f"reruns{extra}. Method: {b.label}{const}{cov} (a discrete metric such as accuracy, ties and "
             "unfinished reruns only make it conservative). The pointwise bound U holds for one τ fixed in "
             f"advance. The band's own sample floor is N ≥ {b.sample_floor} (the pointwise card's: "
             f"N_min = {e0.sample_floor}).", ""]
    rows = [[f"{e.tau:g}", f"{bb.k}/{bb.n}",
             shown_u(bb.pointwise_upper_bound, e.eps, _pointwise_verdict(e)), _f(bb.upper_bound),
             "yes" if bb.supported else "no"] for e, bb in zip(entries, bands, strict=True)]
    lines += [md_table(["τ", "failures/N", "pointwise U (this τ only)", "band bound (every τ)",
                         f"band certifies ε = {e0.eps}"], rows), ""]
    lim = b.certified_tau_limit
    if lim is None:
        why = (f"N = {b.n} is below the band's sample floor {b.sample_floor}" if b.n < b.sample_floor
               else "too many reruns fail at every bar")
        lines += [f"The band certifies ε = {e0.eps} at no τ ({why}).", ""]
    else:
        side = "≤" if e0.higher_is_better else "≥"
        lines += [f"The band certifies ε = {e0.eps} at **every τ {side} {lim:g}** at once.", ""]
    if image:
        lines += [f"![simultaneous band and pointwise bound]({image})", ""]
    return lines


def band_plot(entries: list[CardEntry]):
    """Upper bound on P(next rerun fails τ) as a function of τ: the simultaneous band (valid for every
    τ at once) beside the pointwise Clopper–Pearson bound U(k(τ), N) (valid for one τ fixed in
    advance) and the observed failure fraction, with ε and the card's τ marked."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    e0 = entries[0]
    b = e0.band
    vals = np.array([np.nan if r.value is None else r.value for r in e0.reruns], dtype=float)
    finite = vals[np.isfinite(vals)]
    taus = [e.tau for e in entries]
    lo = min([*finite.tolist(), *taus]) - 0.02
    hi = max([*finite.tolist(), *taus]) + 0.02
    grid = np.unique(np.r_[np.linspace(lo, hi, 800), finite, finite + 1e-9, finite - 1e-9])
    bb = stats.band_bounds(vals, grid, eps=e0.eps, delta=b.delta, higher_is_better=e0.higher_is_better,
                           method=b.method, n_extra_failures=b.n_unlaunched_counted_as_failures,
                           with_floor=False)  # the card holds the floor
    fig = Figure(figsize=(7, 3.6), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(grid, bb.upper, color="#d84a3b", lw=2, label=f"simultaneous band, every τ ({b.method})")
    ax.plot(grid, bb.pointwise_upper, color="#3b7dd8", lw=1.5, label="pointwise Clopper–Pearson U, one τ")
    ax.plot(grid, np.asarray(bb.k) / bb.n, color="grey", lw=1, ls=":", label="observed failure fraction k/N")
    ax.axhline(e0.eps, color="black", lw=1, ls="--", label=f"ε = {e0.eps}")
    for t in taus:
        ax.axvline(t, color="black", lw=0.8, ls=":")
        ax.text(t, 1.0, f" τ={t:g}", va="top", fontsize=8)
    ax.set_xlabel(f"release bar τ ({e0.metric}, {'higher' if e0.higher_is_better else 'lower'} is better)")
    ax.set_ylabel("upper bound on P(fail)")
    ax.set_ylim(-0.02, 1.05)
    ax.set_title(f"{e0.label}: N = {bb.n}, 1 − δ = {1 - b.delta:.0%}; band floor {b.sample_floor}",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left" if e0.higher_is_better else "upper right")
    fig.tight_layout()
    return fig
