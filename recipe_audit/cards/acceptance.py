"""Acceptance cards: the document, Markdown, figures and files.

The document is plain JSON validated against ``schemas/acceptance_card.v1.json``. It always has
``cells`` (one card per defense/baseline pair), ``progressive_filter`` and
``threshold_sensitivity``; with exactly one pair the top level also carries that card's
``defense``, ``baseline``, ``diagnostics`` (``a``, ``b``, ``c``, ``d``), ``verdict``,
``weaker_claims`` and ``delta_deploy``. Figures return a matplotlib ``Figure``; only
:func:`write_card` touches disk, and it writes everything or nothing.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from recipe_audit.cards import schemas
from recipe_audit.cards.build import installed_versions
from recipe_audit.cards.tables import md_table
from recipe_audit.stats import acceptance as gates

__all__ = [
    "CARD_KIND",
    "DOES_NOT_PROVE",
    "SCHEMA_FILE",
    "SCHEMA_VERSION",
    "AcceptanceCardError",
    "alpha_plot",
    "build_document",
    "cell_card",
    "delta_plot",
    "schema",
    "summary_table",
    "to_markdown",
    "validate",
    "weaker_claims",
    "write_card",
]

SCHEMA_VERSION = "1.0"
CARD_KIND = "acceptance_card"
SCHEMA_FILE = "acceptance_card.v1.json"

GATE_TITLES = {
    "a": "(a) question-clustered bootstrap, held-out split",
    "b": "(b) fresh subjects",
    "c": "(c) mechanism signature ρ_AT",
    "d": "(d) cross-task transfer",
}

DOES_NOT_PROVE = {
    "a": "that the reduction survives new subjects (the held-out questions share the training subjects), "
         "nor why the gap shrank",
    "b": "which mechanism shrank the gap: a generic shrinkage of all framing sensitivity passes too",
    "c": "that behaviour changed: ρ_AT is a first-order signature on the base model's gradients at the "
         "calibration items, not a causal account",
    "d": "that the defense generalises beyond the two tasks measured",
}


class AcceptanceCardError(ValueError):
    """An acceptance card document is invalid or cannot be written (one sentence)."""


# ---------------------------------------------------------------------------------------------
# Document
# ---------------------------------------------------------------------------------------------


def _num(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _missing(reason: str) -> dict[str, Any]:
    return {"status": gates.MISSING, "statistic": None, "threshold": None, "reason": f"Not run: {reason.rstrip('.')}."}


def weaker_claims(res: gates.AcceptanceResult, *, cross_task: str | None = None) -> list[str]:
    """The claims that survive even when the full card does not pass (none when undefined)."""
    if not res.primary.installable:
        return []
    out = []
    if res.a is not None and res.a.status == gates.PASS:
        lo, hi = res.a.ci_gap
        out.append(f"gap reduction statistically reliable on the held-out split (a): Δgap = {res.a.delta_gap:.4f}, "
                   f"{res.a.level:.0%} question-clustered interval [{lo:.4f}, {hi:.4f}] below 0")
    if res.b is not None:
        if res.b.status == gates.PASS:
            out.append(f"gap reduction holds on fresh subjects under both paired and independent standard errors "
                       f"(b): Δgap = {res.b.delta_gap:.4f}")
        elif res.b.paired_only_pass:
            out.append(f"gap reduction on fresh subjects under the paired standard error only (the paired half of "
                       f"(b)): Δgap + {res.b.multiplier:g}·SE_paired = {res.b.bound_paired:.4f} < 0")
    if res.c is not None and res.c.status == gates.PASS:
        out.append(f"the update's parameter-space signature matches the claimed {res.c.claimed_class} mechanism "
                   f"(c): ρ_AT = {res.c.signature.rho:.4f}")
    if res.d is not None and res.d.status in (gates.PASS, gates.CAVEAT):
        where = f" to task '{cross_task}'" if cross_task else ""
        extra = ", with a restricted recipe variant (caveat)" if res.d.status == gates.CAVEAT else ""
        out.append(f"the reduction transfers{where} with a comparable size (d){extra}: Γ_P = {res.d.gamma_P:.4f}, "
                   f"Γ_X = {res.d.gamma_X:.4f}")
    return out


def _verdict_reason(res: gates.AcceptanceResult) -> str:
    st = res.statuses
    v = res.verdict
    names = lambda pred: ", ".join(f"({g})" for g in gates.GATES if pred(st[g]))  # noqa: E731
    if v == gates.UNDEFINED:
        p = res.primary
        return (f"The primary baseline gap {p.gap:.4f} is not installed (not above {p.multiplier:g}·SE = "
                f"{p.multiplier * p.se:.4f}), so no diagnostic means anything.")
    if v == gates.FULL_PASS:
        return "All four diagnostics pass strictly."
    if v == gates.MISSING_EVIDENCE:
        return f"No diagnostic failed, but {names(lambda s: s == gates.MISSING)} {'is' if list(st.values()).count(gates.MISSING) == 1 else 'are'} missing."
    if v == gates.NEAR_MISS:
        parts = []
        for label, s in (("fail", gates.FAIL), ("N/A", gates.NA), ("passed with caveat", gates.CAVEAT), ("missing", gates.MISSING)):
            got = names(lambda x, s=s: x == s)
            if got:
                parts.append(f"{got} {label}")
        return f"{names(lambda s: s == gates.PASS)} pass; " + "; ".join(parts) + "."
    return "No diagnostic passes strictly (N/A and pass-with-caveat do not count as passes)."


def _delta_deploy(res: gates.AcceptanceResult) -> dict[str, Any] | None:
    if res.a is not None:
        return {"estimate": _num(res.a.delta_deploy), "interval": [_num(x) for x in res.a.ci_deploy],
                "level": res.a.level, "method": "question-clustered paired bootstrap, held-out split",
                "note": "reported beside the gates; never rescues a verdict"}
    if res.b is not None:
        se = res.b.se_deploy_paired
        lo, hi = res.b.delta_deploy - 2 * se, res.b.delta_deploy + 2 * se
        return {"estimate": _num(res.b.delta_deploy), "interval": [_num(lo), _num(hi)], "level": None,
                "method": "fresh split, ± 2 paired standard errors (no held-out records)",
                "note": "reported beside the gates; never rescues a verdict"}
    return None


def cell_card(pair, res: gates.AcceptanceResult, *, task: str, cross_task: str | None = None,
              mechanism_inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One pair's card: diagnostics a–d (each with status, statistic, threshold, reason and what it
    does not prove), the verdict and its reason, the surviving weaker claims, Δdeploy."""
    reasons = dict(res.missing_reasons)
    diags = {}
    for g in gates.GATES:
        gate = getattr(res, g)
        d = gate.to_dict() if gate is not None else _missing(reasons.get(g, "not run"))
        d["title"] = GATE_TITLES[g]
        d["does_not_prove"] = DOES_NOT_PROVE[g]
        diags[g] = d
    if diags["c"]["status"] != gates.MISSING and mechanism_inputs:
        diags["c"]["inputs"] = dict(mechanism_inputs)
    return {
        "label": pair.label or pair.defense,
        "defense": pair.defense,
        "baseline": pair.baseline,
        "task": task,
        "cross": None if cross_task is None else {"task": cross_task, "defense": pair.cross_defense,
                                                  "baseline": pair.cross_baseline,
                                                  "restricted_variant": bool(pair.restricted)},
        "primary_baseline_gap": res.primary.to_dict(),
        "diagnostics": diags,
        "statuses": res.statuses,
        "verdict": res.verdict,
        "verdict_reason": _verdict_reason(res),
        "weaker_claims": weaker_claims(res, cross_task=cross_task),
        "delta_deploy": _delta_deploy(res),
    }


def software_versions() -> dict[str, str]:
    return installed_versions(("recipe_audit", "numpy", "scipy", "pandas", "torch", "transformers", "peft",
                               "mlflow"))


def document_digest(doc: Mapping[str, Any]) -> str:
    """sha256 over the records digest, the options and every cell's card (not the creation time)."""
    payload = {"records_digest": doc["source"].get("records_digest"), "options": doc["options"], "cells": doc["cells"]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, allow_nan=False).encode()).hexdigest()


def build_document(pairs: Sequence, results: Sequence[gates.AcceptanceResult], *, options: Mapping[str, Any],
                   source: Mapping[str, Any], mechanism_inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The acceptance card document (validated) for ``pairs`` and their ``results``."""
    if not pairs or len(pairs) != len(results):
        raise AcceptanceCardError("An acceptance card needs one result per defense/baseline pair, and at least one.")
    mechanism_inputs = mechanism_inputs or {}
    task, cross = options["primary_task"], options.get("cross_task")
    cells = [cell_card(p, r, task=task, cross_task=cross, mechanism_inputs=mechanism_inputs.get(p.defense))
             for p, r in zip(pairs, results, strict=True)]
    labels = [c["label"] for c in cells]
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": CARD_KIND,
        "claim": "this fine-tuning recipe reduces an installed evaluation-vs-deployment gap",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "software": software_versions(),
        "source": dict(source),
        "options": dict(options),
        "cells": cells,
        "progressive_filter": [r.to_dict() for r in gates.progressive_filter(results)],
        "threshold_sensitivity": [r.to_dict() for r in gates.threshold_sensitivity(results, labels)],
    }
    if len(cells) == 1:
        one = cells[0]
        for key in ("defense", "baseline", "diagnostics", "verdict", "verdict_reason", "weaker_claims", "delta_deploy"):
            doc[key] = one[key]
    doc["digest"] = document_digest(doc)
    validate(doc)
    return doc


def schema() -> dict[str, Any]:
    return schemas.load(SCHEMA_FILE)


def validate(doc: Mapping[str, Any]) -> None:
    """Raise :class:`AcceptanceCardError` (one sentence) when ``doc`` is not a valid acceptance card."""
    schemas.check(doc, SCHEMA_FILE, AcceptanceCardError, "acceptance card")


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------


def _f(x, nd: int = 4) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def _ci(pair) -> str:
    return "—" if not pair or pair[0] is None else f"[{pair[0]:.4f}, {pair[1]:.4f}]"


def _statistic_text(g: str, d: Mapping[str, Any]) -> str:
    if d["status"] == gates.MISSING:
        return "—"
    if g == "a":
        return (f"upper end of the {d['level']:.0%} interval = {_f(d['statistic']['value'])} "
                f"(Δgap = {_f(d['delta_gap'])}, interval {_ci(d['ci_delta_gap'])})")
    if g == "b":
        return (f"Δgap = {_f(d['delta_gap'])}; + 2·SE_paired = {_f(d['bound_paired'])}; "
                f"+ 2·SE_indep = {_f(d['bound_indep'])}")
    if g == "c":
        return (f"ρ_AT = {_f(d['rho_AT'])} (α_T = {_f(d['alpha_T'])}, α_A = {_f(d['alpha_A'])}); "
                f"signed {d['signed_class'] or 'undefined'}, claimed {d['claimed_class']}")
    return (f"Γ_P = {_f(d['gamma_P'])}, Γ_X = {_f(d['gamma_X'])}, |Γ_X − Γ_P| = "
            f"{_f(None if d['gamma_P'] is None or d['gamma_X'] is None else abs(d['gamma_X'] - d['gamma_P']))}, "
            f"SE_comb = {_f(d['se_comb'])}")


def summary_table(doc: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one row per cell with the four statuses, the verdict and Δdeploy."""
    header = ["cell", "baseline", "(a)", "(b)", "(c)", "(d)", "verdict", "Δdeploy [interval]"]
    rows = []
    for c in doc["cells"]:
        dd = c["delta_deploy"]
        ddt = "—" if dd is None else f"{_f(dd['estimate'])} {_ci(dd['interval'])}"
        rows.append([c["label"], c["baseline"], *(c["statuses"][g] for g in gates.GATES), c["verdict"], ddt])
    return header, rows


def to_markdown(doc: Mapping[str, Any], images: Mapping[str, str] | None = None) -> str:
    """The card for people: the verdict grid, each cell's gates (statistic, threshold, status and
    what it does not prove), weaker claims, Δdeploy, the progressive filter and the sensitivity table."""
    o, src = doc["options"], doc["source"]
    lines = [
        "# Acceptance card",
        "",
        f"Claim under audit: *{doc['claim']}*.",
        "",
        f"Primary task `{o['primary_task']}`" + (f" · cross task `{o['cross_task']}`" if o.get("cross_task") else "")
        + f" · {src['n_records']} evaluation records (digest `{src['records_digest'][:16]}`) · "
        f"{o['resamples']} question-clustered resamples, seed {o['seed']}, {o['level']:.0%} percentile intervals · "
        f"ρ_AT boundary {o['boundary']:g}.",
        "",
        "Verdicts: `full-card pass` (all four strict passes), `near miss`, `missing evidence` (nothing failed, "
        "something was not run), `undefined` (the baseline gap itself is not installed), `fail` (nothing passes). "
        "N/A is never a pass; missing is not a fail; Δdeploy never rescues a verdict.",
        "",
    ]
    header, rows = summary_table(doc)
    lines += ["## Verdicts", "", md_table(header, rows), ""]
    for c in doc["cells"]:
        lines += [f"## {c['label']} vs baseline {c['baseline']}", "",
                  f"**Verdict: `{c['verdict']}`** — {c['verdict_reason']}", ""]
        p = c["primary_baseline_gap"]
        lines += [f"Primary baseline gap r_D − r_E = {_f(p['gap'])} (question-clustered SE {_f(p['se'])}, "
                  f"{p['n_questions']} questions): {'installed' if p['installable'] else '**not installed**'}.", ""]
        trows = []
        for g in gates.GATES:
            d = c["diagnostics"][g]
            trows.append([d["title"], _statistic_text(g, d), d["threshold"] or "—", f"**{d['status']}**",
                          d["does_not_prove"]])
        lines += [md_table(["diagnostic", "statistic", "threshold", "status", "what it does not prove"], trows), ""]
        for g in gates.GATES:
            lines.append(f"- ({g}) {c['diagnostics'][g]['reason']}")
        a = c["diagnostics"]["a"]
        if a["status"] != gates.MISSING and a.get("item_level_comparison"):
            il = a["item_level_comparison"]
            lines += ["", f"Item-level comparison (templates treated as independent — **too narrow, not the gate**): "
                          f"Δgap interval {_ci(il['ci_delta_gap'])} vs question-clustered {_ci(a['ci_delta_gap'])}."]
        cd = c["diagnostics"]["c"]
        if cd["status"] != gates.MISSING:
            by = ", ".join(f"{b['boundary']:g} → {b['class'] or 'undefined'} ({b['status']})" for b in cd["by_boundary"])
            lines += ["", f"(c) raw dot products ⟨ΔW, v_T⟩ = {_f(cd['dot_T'], 6)}, ⟨ΔW, v_A⟩ = {_f(cd['dot_A'], 6)}; "
                          f"class by boundary: {by}."]
            for n in cd.get("notes") or []:
                lines.append(f"(c) note: {n}.")
        dd = c["delta_deploy"]
        if dd is not None:
            lvl = f"{dd['level']:.0%} " if dd["level"] else ""
            lines += ["", f"Δdeploy = r_D^R − r_D^0 = {_f(dd['estimate'])}, {lvl}interval {_ci(dd['interval'])} "
                          f"({dd['method']}; reported beside the gates, never rescues a verdict)."]
        lines += ["", "Weaker claims that survive:" if c["weaker_claims"] else "No weaker claim survives.", ""]
        lines += [f"- {w}" for w in c["weaker_claims"]]
        lines.append("")
    pf = doc["progressive_filter"]
    lines += ["## Progressive filter", "",
              f"Of {pf[0]['n_cells'] if pf else 0} cell(s): how many have a result (not missing, not N/A) for "
              f"every listed diagnostic, and how many pass them all strictly.", "",
              md_table(["filter", "cells with a result", "cells passing"],
                        [[r["filter"], str(r["n_with_result"]), str(r["n_pass"])] for r in pf]), ""]
    sens = [r for r in doc["threshold_sensitivity"] if r["verdict_changes"] or r["status"] != r["status_variant"]]
    lines += ["## Threshold sensitivity", "",
              f"The card re-read at a {o['sensitivity_level']:.0%} interval for (a), a one-SE paired-only screen for "
              f"(b), and ρ_AT boundaries {' / '.join(f'{b:g}' for b in o['sensitivity_boundaries'])} for (c), one at a "
              f"time.", ""]
    if sens:
        lines += [md_table(["cell", "diagnostic", "re-read at", "status", "→", "verdict", "→", "verdict changes"],
                            [[r["cell"], f"({r['gate']})", r["variant"], r["status"], r["status_variant"], r["verdict"],
                              r["verdict_variant"], "**yes**" if r["verdict_changes"] else "no"] for r in sens]), ""]
    else:
        lines += ["No status and no verdict changes under these re-readings.", ""]
    if images:
        lines += ["## Figures", ""]
        for title, name in images.items():
            lines += [f"![{title}]({name})", ""]
    lines += [f"---\nCard digest `{doc['digest']}` · created {doc['created']} · "
              + ", ".join(f"{k} {v}" for k, v in doc["software"].items())]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

_VERDICT_COLOURS = {gates.FULL_PASS: "#2a9d3f", gates.NEAR_MISS: "#e0a100", gates.MISSING_EVIDENCE: "#7a7a7a",
                    gates.UNDEFINED: "#9b59b6", gates.VERDICT_FAIL: "#d84a3b"}


def delta_plot(doc: Mapping[str, Any]):
    """Cells in the (Δdeploy, Δgap) plane with their intervals on both axes (gate (a)); a cell
    below the horizontal zero line reduced the gap, one left of the vertical line paid deployment
    accuracy for it. Colour = card verdict."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4.6), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    shown = 0
    for c in doc["cells"]:
        a = c["diagnostics"]["a"]
        if a["status"] == gates.MISSING or a["delta_gap"] is None:
            continue
        x, y = a["delta_deploy"], a["delta_gap"]
        xl, xh = a["ci_delta_deploy"]
        yl, yh = a["ci_delta_gap"]
        col = _VERDICT_COLOURS.get(c["verdict"], "black")
        ax.errorbar([x], [y], xerr=[[x - xl], [xh - x]], yerr=[[y - yl], [yh - y]], fmt="o", color=col,
                    ecolor=col, capsize=3, ms=5)
        ax.annotate(c["label"], (x, y), textcoords="offset points", xytext=(5, 5), fontsize=7)
        shown += 1
    ax.axhline(0, color="black", lw=0.8)
    ax.axvline(0, color="black", lw=0.8, ls=":")
    for v, col in _VERDICT_COLOURS.items():
        if any(c["verdict"] == v for c in doc["cells"]):
            ax.plot([], [], "o", color=col, label=v)
    ax.set_xlabel("Δdeploy = r_D^R − r_D^0")
    ax.set_ylabel("Δgap = gap^R − gap^0 (below 0: reduction)")
    lvl = doc["options"]["level"]
    ax.set_title(f"Cells with {lvl:.0%} question-clustered intervals" + ("" if shown else " (no held-out records)"),
                 fontsize=9)
    if shown:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def alpha_plot(doc: Mapping[str, Any]):
    """α_T against α_A per cell, with the ρ_AT boundary lines |α_A| = ρ·|α_T| (0.5, 0.6, 0.7):
    points between the lines around the α_T axis sign attack-targeted, the rest shrinkage."""
    import numpy as np
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 4.6), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    pts = []
    for c in doc["cells"]:
        d = c["diagnostics"]["c"]
        if d["status"] == gates.MISSING or d["alpha_T"] is None or d["alpha_A"] is None:
            continue
        pts.append((c["label"], d["alpha_T"], d["alpha_A"], d["claimed_class"], d["status"]))
    span = max([abs(v) for _, t, a, _, _ in pts for v in (t, a)] or [1.0]) * 1.15 or 1.0
    xs = np.array([-span, span])
    bounds = sorted({*doc["options"]["sensitivity_boundaries"], doc["options"]["boundary"]})
    b0 = doc["options"]["boundary"]
    ax.fill([0, span, span], [0, b0 * span, -b0 * span], color="#f2d7d5", alpha=0.6, lw=0,
            label=f"attack-targeted (ρ_AT < {b0:g})")
    ax.fill([0, -span, -span], [0, b0 * span, -b0 * span], color="#f2d7d5", alpha=0.6, lw=0)
    for b in bounds:
        main = b == doc["options"]["boundary"]
        style = dict(color="#444444" if main else "#999999", lw=1.2 if main else 0.8, ls="-" if main else "--")
        ax.plot(xs, b * xs, **style, label=f"ρ_AT = {b:g}")
        ax.plot(xs, -b * xs, **style)
    markers = {gates.SHRINKAGE: "s", gates.ATTACK_TARGETED: "^"}
    colours = {gates.PASS: "#2a9d3f", gates.FAIL: "#d84a3b", gates.NA: "#7a7a7a"}
    for label, t, a, cls, st in pts:
        ax.plot([t], [a], markers.get(cls, "o"), color=colours.get(st, "black"), ms=6)
        ax.annotate(label, (t, a), textcoords="offset points", xytext=(5, 4), fontsize=7)
    for cls, m in markers.items():
        ax.plot([], [], m, color="#555555", label=f"claimed {cls}")
    ax.axhline(0, color="black", lw=0.5)
    ax.axvline(0, color="black", lw=0.5)
    ax.set_xlim(-span, span)
    ax.set_ylim(-span, span)
    ax.set_xlabel("α_T = ⟨ΔW, v_T⟩ / ‖v_T‖")
    ax.set_ylabel("α_A = ⟨ΔW, v_A⟩ / ‖v_A‖")
    ax.set_title("Mechanism signature (green: signed class = claimed class)" if pts else "No mechanism inputs",
                 fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def _dump(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, allow_nan=False, ensure_ascii=False)


def write_card(doc: Mapping[str, Any], *, json_path: Path | None = None, out_dir: Path | None = None,
               markdown_path: Path | None = None, stem: str = "acceptance_card") -> dict[str, Path]:
    """Write the card: ``json_path`` (JSON only), ``markdown_path`` (Markdown only), and/or
    ``out_dir`` (JSON, Markdown and the two PNGs). Everything is rendered into temporary files
    first and moved into place only when all of it succeeded. Returns the written paths."""
    validate(doc)
    staged: list[tuple[Path, Path]] = []
    files: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix=".acceptance-card-") as tmp:
        t = Path(tmp)
        if out_dir is not None:
            images = {"cells in (Δdeploy, Δgap)": f"{stem}_deltas.png"}
            delta_plot(doc).savefig(t / images["cells in (Δdeploy, Δgap)"])
            if any(c["diagnostics"]["c"]["status"] != gates.MISSING for c in doc["cells"]):
                images["α_T against α_A"] = f"{stem}_alphas.png"
                alpha_plot(doc).savefig(t / images["α_T against α_A"])
            (t / f"{stem}.md").write_text(to_markdown(doc, images), encoding="utf-8")
            (t / f"{stem}.json").write_text(_dump(doc), encoding="utf-8")
            for name in [*images.values(), f"{stem}.md", f"{stem}.json"]:
                staged.append((t / name, Path(out_dir) / name))
            files.update({"json_in_out": Path(out_dir) / f"{stem}.json", "markdown_in_out": Path(out_dir) / f"{stem}.md"})
            for title, name in images.items():
                files["deltas_png" if "Δgap" in title else "alphas_png"] = Path(out_dir) / name
        if json_path is not None:
            (t / "card.json").write_text(_dump(doc), encoding="utf-8")
            staged.append((t / "card.json", Path(json_path)))
            files["json"] = Path(json_path)
        if markdown_path is not None:
            (t / "card.md").write_text(to_markdown(doc), encoding="utf-8")
            staged.append((t / "card.md", Path(markdown_path)))
            files["markdown"] = Path(markdown_path)
        for src, dst in staged:  # rendering succeeded: move into place (atomic per file)
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp_dst = dst.with_name(f".{dst.name}.tmp")
            with open(src, "rb") as fi, open(tmp_dst, "wb") as fo:
                fo.write(fi.read())
            os.replace(tmp_dst, dst)
    return files
