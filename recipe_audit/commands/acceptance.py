"""``recipe-audit acceptance``: the acceptance card of a fine-tuning defense claim.

    recipe-audit acceptance --records eval.csv --defense lora_reg_s0 --baseline adamw_s0 --json card.json
    recipe-audit acceptance --records runs:/RUN/eval_records.json --records more.parquet \\
        --defense d_s0 --defense d_s1 --baseline b_s0 --baseline b_s1 \\
        --cross-task arith --mechanism mechanism.yaml --out cards/

Cells are named as in the records' ``cell`` column. Bad input: one sentence on stderr, exit 2,
no card written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from recipe_audit.commands.args import TRACKING_URI_HELP, count, number, positive, probability

margin = number(lambda v: 0 <= v < 0.5, "must lie in [0, 0.5)")

# The defaults the help states; the statistics module (NumPy) is imported only to run the card,
# so --help answers at once. tests/test_cli_fast.py checks them against recipe_audit.stats.acceptance.
MECHANISM_CLASSES = ("shrinkage", "attack-targeted")
DEFAULT_BOUNDARY = 0.6
DEFAULT_RESAMPLES = 5000
DEFAULT_LEVEL = 0.95
DEFAULT_MARGIN = 0.02


def register(subparsers) -> dict:
    p = subparsers.add_parser(
        "acceptance", help="acceptance card of a defense claim: the four diagnostic gates",
        description="Does this fine-tuning recipe really reduce an installed evaluation-vs-deployment gap? "
                    "Runs the four gates on evaluation records (and weights or α for (c)) and writes the card.")
    src = p.add_argument_group("records")
    src.add_argument("--records", action="append", default=[], metavar="FILE",
                     help="CSV/JSONL/JSON/Parquet file or MLflow artifact URI (runs:/RUN/eval_records.json); repeatable")
    src.add_argument("--records-experiment", default=None, metavar="NAME",
                     help="also read the records table of every run of this MLflow experiment")
    src.add_argument("--records-table", default="eval_records.json", metavar="FILE",
                     help="artifact name of the records table (default eval_records.json)")
    src.add_argument("--tracking-uri", default=None, help=f"MLflow tracking URI ({TRACKING_URI_HELP})")
    cells = p.add_argument_group("cells")
    cells.add_argument("--defense", action="append", default=[], metavar="CELL", required=True,
                       help="defense cell (repeat for several)")
    cells.add_argument("--baseline", action="append", default=[], metavar="CELL", required=True,
                       help="matched baseline cell: one for all defenses, or one per --defense, in order")
    cells.add_argument("--task", default=None, help="primary task (default: the only task of these cells)")
    cells.add_argument("--cross-task", default=None, help="structurally different task for diagnostic (d)")
    cells.add_argument("--cross-defense", action="append", default=[], metavar="CELL",
                       help="defense cell on the cross task (default: the --defense names)")
    cells.add_argument("--cross-baseline", action="append", default=[], metavar="CELL",
                       help="baseline cell on the cross task (default: the --baseline names)")
    cells.add_argument("--cross-restricted", nargs="*", default=None, metavar="CELL",
                       help="the cross-task run used a restricted recipe variant (all defenses, or the named ones)")
    mech = p.add_argument_group("mechanism (diagnostic c)")
    mech.add_argument("--mechanism", default=None, metavar="FILE",
                      help="YAML/JSON config: base_model, calibration, slice, claimed_class, cells: {CELL: {adapter|finetuned}}")
    mech.add_argument("--alphas", default=None, metavar="FILE", help="JSON with α_T and α_A computed elsewhere")
    mech.add_argument("--claimed-class", choices=MECHANISM_CLASSES, default=None,
                      help="claimed mechanism class when the α file does not declare it")
    mech.add_argument("--boundary", type=positive, default=DEFAULT_BOUNDARY, help="ρ_AT boundary (default 0.6)")
    opt = p.add_argument_group("statistics")
    opt.add_argument("--resamples", type=count, default=DEFAULT_RESAMPLES, help="bootstrap resamples (default 5000)")
    opt.add_argument("--seed", type=count, default=0, help="bootstrap seed (default 0)")
    opt.add_argument("--level", type=probability, default=DEFAULT_LEVEL, help="interval level for (a) (default 0.95)")
    opt.add_argument("--margin", type=margin, default=DEFAULT_MARGIN,
                     help="degeneracy margin for (d) baseline rates (default 0.02)")
    opt.add_argument("--no-item-level", action="store_true", help="skip the item-level comparison intervals")
    out = p.add_argument_group("output")
    out.add_argument("--json", dest="json_path", type=Path, default=None, metavar="PATH", help="write the JSON card")
    out.add_argument("--markdown", dest="markdown_path", type=Path, default=None, metavar="PATH",
                     help="write the Markdown card")
    out.add_argument("--out", type=Path, default=None, metavar="DIR", help="write JSON, Markdown and the two figures here")
    return {"acceptance": cmd_acceptance}


def cmd_acceptance(a: argparse.Namespace) -> int:
    from recipe_audit.acceptance.audit import AcceptanceRequest, run_acceptance
    from recipe_audit.cards.acceptance import summary_table, write_card

    if not a.records and not a.records_experiment:
        raise ValueError("Give at least one --records FILE (or --records-experiment NAME).")
    if a.resamples < 1:
        raise ValueError("--resamples must be at least 1.")
    tracking_uri = a.tracking_uri
    if tracking_uri is None and (a.records_experiment or any(":/" in r for r in a.records)
                                 or a.mechanism):
        from recipe_audit.store.tracking import resolve_tracking_uri

        tracking_uri = resolve_tracking_uri(None)
    restricted = False if a.cross_restricted is None else (True if not a.cross_restricted else tuple(a.cross_restricted))
    req = AcceptanceRequest(
        records=tuple(a.records), defense=tuple(a.defense), baseline=tuple(a.baseline), task=a.task,
        cross_task=a.cross_task, cross_defense=tuple(a.cross_defense), cross_baseline=tuple(a.cross_baseline),
        cross_restricted=restricted, mechanism=a.mechanism, alphas=a.alphas, claimed_class=a.claimed_class,
        resamples=a.resamples, seed=a.seed, level=a.level, boundary=a.boundary, margin=a.margin,
        item_level=not a.no_item_level, records_experiment=a.records_experiment, records_table=a.records_table,
        tracking_uri=tracking_uri)
    card = run_acceptance(req)
    files = write_card(card, json_path=a.json_path, out_dir=a.out, markdown_path=a.markdown_path)
    header, rows = summary_table(card)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    for c in card.cells:
        print(f"{c.label}: {c.verdict} — {c.verdict_reason}")
    for key, path in files.items():
        print(f"wrote {key}: {path}")
    return 0
