"""``recipe-audit card``: the recipe cards of an experiment's reruns, from the tracking store alone.

    recipe-audit card --experiment-name recipe_audit --tau 0.7 0.8 --json card.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from recipe_audit import keys
from recipe_audit.commands.args import (
    TRACKING_URI_HELP,
    audit_arguments,
    audit_flags,
    audit_values,
    count,
    family_or_anytime,
    whole,
)
from recipe_audit.errors import first_line
from recipe_audit.stats.options import option_fields

#: The audit options ``recipe-audit card --help`` lists right after the card's inputs (the others follow
#: the bootstrap's options).
CARD_OPTIONS_FIRST = ("taus", "eps", "delta", "higher_is_better", "unfinished")
SPLITS_MAX = 100_000
BOOTSTRAP_MAX = 100_000


def register(subparsers) -> dict:
    c = subparsers.add_parser("card", help="compute recipe cards from an MLflow experiment",
                              description="The recipe cards of an experiment's reruns, from the tracking store "
                                          "alone: for each recipe and audit set (or --metric) at each bar τ, the "
                                          "failures k of N reruns, the exact upper bound U on the next rerun's "
                                          "failure probability, the sample floor N_min and the verdict. A rerun "
                                          "that did not finish counts as a failure.")
    c.add_argument("--experiment-name", required=True,
                   help="the MLflow experiment whose reruns the card reads (a sweep's: its app's job name, "
                        "recipe_audit for the built-in trainer)")
    c.add_argument("--tracking-uri", default=None,
                   help=TRACKING_URI_HELP)
    c.add_argument("--metric", default=None, help=f"metric key (default {keys.DEFAULT_METRIC})")
    c.add_argument("--audit", action="append", default=None, metavar="AUDIT",
                   help="audit set; shorthand for --metric accuracy/AUDIT; repeated, the cards of several "
                        "audit sets side by side, the first as the calibration audit")
    c.add_argument("--all-audits", action="store_true",
                   help="a card for every audit set the reruns were scored on, side by side")
    c.add_argument("--seed-key", default="tags." + keys.TAG_SEED,
                   help=f"where the seed is, MLflow-style, e.g. params.seed (default tags.{keys.TAG_SEED})")
    c.add_argument("--group-by", action="extend", nargs="+", default=[], metavar="KEY",
                   help="keys that define a cell besides the recipe identity (e.g. params.model_name; "
                        "default: none)")
    audit_arguments(c, CARD_OPTIONS_FIRST)
    c.add_argument("--recipe-id", default=None, help="only this recipe identity (default: every recipe)")
    c.add_argument("--sweep-id", default=None, help="only the reruns of this sweep (default: every sweep)")
    c.add_argument("--planned-seeds", default=None,
                   help="seeds that were planned, e.g. 'range(59)' or '0,1,2' (default: from the sweeps)")
    c.add_argument("--json", dest="json_path", type=Path, default=None, metavar="PATH",
                   help="write the card JSON here")
    c.add_argument("--out", type=Path, default=None, metavar="DIR", help="write JSON, Markdown and PNGs here")
    c.add_argument("--log-run", action="store_true",
                   help="also log the card in MLflow, one card run per cell beside its reruns (a cell whose card, "
                        "from the same reruns with the same options, is already logged reuses that run); by "
                        "default nothing is written to the store")
    c.add_argument("--split-audit", action="store_true", help="add the held-out split audit")
    c.add_argument("--responsiveness", action="store_true", help="add the evidence-responsiveness plot")
    c.add_argument("--splits", type=whole(1, SPLITS_MAX), default=1000,
                   help=f"random splits for the split audit, 1 to {SPLITS_MAX} (default 1000)")
    c.add_argument("--bootstrap", type=whole(1, BOOTSTRAP_MAX), default=2000,
                   help=f"bootstrap resamples B, 1 to {BOOTSTRAP_MAX} (default 2000)")
    c.add_argument("--bootstrap-seed", type=count, default=0, help="seed of the bootstrap (default 0)")
    # every other audit option, as declared: --family-size, --anytime (and any option added to AuditOptions)
    audit_arguments(c, [f.name for f in option_fields() if f.name not in CARD_OPTIONS_FIRST])
    c.add_argument("--band-method", choices=("auto", "exact-cp", "exact-ks", "dkw"), default="auto",
                   help="the simultaneous band valid for every τ (default auto: the exact Clopper–Pearson "
                        "shape up to 2000 reruns, the exact KS band up to 20000, DKW beyond)")
    return {"card": cmd_card}


def cmd_card(a: argparse.Namespace) -> int:
    from recipe_audit.commands import card_input as check
    from recipe_audit.store.tracking import resolve_tracking_uri

    # what the options alone decide, before the store is read
    if not a.experiment_name.strip():
        raise ValueError("--experiment-name must name an experiment.")
    family_or_anytime(a, "a card")
    audits = list(a.audit or [])
    check.audit_names(audits)
    if a.metric is not None and not a.metric.strip():
        raise ValueError("--metric must name a metric key.")
    if a.metric and (audits or a.all_audits):
        raise ValueError("Give --metric or --audit/--all-audits, not both.")
    metric = a.metric or keys.accuracy_key(audits[0] if audits else keys.DEFAULT_AUDIT)
    shift = a.all_audits or len(audits) > 1
    metrics = [keys.accuracy_key(x) for x in dict.fromkeys(audits)] if shift and audits else [metric]
    given = audit_values(a)  # the audit options, as declared (recipe_audit.stats.options.AuditOptions)
    taus = tuple(given["taus"])
    from recipe_audit.cards.model import CardOptions

    # the one validator of every door (recipe_audit.stats.options): ranges, τ for accuracies, the budget
    opts = CardOptions.from_config(given, bootstrap_B=a.bootstrap, bootstrap_seed=a.bootstrap_seed,
                                   band_method=a.band_method,
                                   metrics=metrics if not a.all_audits else [*metrics, keys.DEFAULT_METRIC],
                                   name=audit_flags().get)
    planned = check.planned_seeds(a.planned_seeds)
    check.output_paths(a.json_path, a.out)
    uri = resolve_tracking_uri(a.tracking_uri)
    check.tracking_uri(uri, will_log=a.log_run)

    from recipe_audit.cards.files import write_json
    from recipe_audit.cards.summary import print_card_summary
    from recipe_audit.release.card_runs import CardOutput
    from recipe_audit.release.compute import CardRequest, compute_card

    req = CardRequest(experiment=a.experiment_name, metric=metric, tracking_uri=uri, seed_key=a.seed_key,
                      group_by=tuple(a.group_by), recipe_id=a.recipe_id, sweep_id=a.sweep_id,
                      planned_seeds=planned)
    if shift:  # one card per audit set, side by side
        from recipe_audit.release.shift import compute_shift_card, scored_audit_sets

        if a.all_audits:
            audits = [*audits, *(x for x in scored_audit_sets(req) if x not in audits)]
            metrics = [keys.accuracy_key(x) for x in audits]
    # what only the store knows: one read (for one metric, the read the card itself is computed from)
    runs = None
    if not shift:
        from recipe_audit.release.compute import read_card_runs

        runs = read_card_runs(req, opts)
    notes = check.store(uri, a.experiment_name, metrics, seed_key=a.seed_key, group_by=a.group_by, taus=taus,
                        higher_is_better=opts.higher_is_better, audits_named=bool(audits) or not a.metric,
                        frame=None if runs is None else runs.frame)
    if shift:
        doc = compute_shift_card(req, opts, audits, split_audit=a.split_audit,
                                 responsiveness=a.responsiveness, n_splits=a.splits)
    else:
        doc = compute_card(req, opts, split_audit=a.split_audit, responsiveness=a.responsiveness,
                           n_splits=a.splits, runs=runs)
    out = CardOutput(doc)  # each file rendered once, for --out and --log-run alike
    try:
        files = out.write(a.out) if a.out else None
        if a.json_path:
            write_json(doc, a.json_path)
    except OSError as exc:
        raise ValueError(f"Cannot write the card to {exc.filename or a.json_path or a.out}: "
                         f"{exc.strerror or exc}.") from None
    for note in notes:  # after the card: an error is the one line on stderr
        print(f"recipe-audit: note: {note}", file=sys.stderr)
    print_card_summary(doc, files)
    if shift:
        from recipe_audit.cards.shift import shift_table
        from recipe_audit.cards.tables import text_table

        header, rows = shift_table(doc.shift, markdown=False, eps=doc.options.get("eps"))
        print("\nShift: calibration audit vs target audits\n" + text_table(rows, header))
    if a.log_run:
        try:
            runs = out.log(uri, a.experiment_name)
        except Exception as exc:  # noqa: BLE001 - a store that refuses the write: one sentence
            if isinstance(exc, ValueError):
                raise
            first = first_line(exc)
            raise ValueError(f"The card was computed but could not be logged to {uri} ({first[:200]}); "
                             "rerun without --log-run to skip logging.") from None
        new = [c.run_id for c in runs if not c.reused]
        old = [c.run_id for c in runs if c.reused]
        print(f"Logged {len(new)} card run(s) to experiment '{a.experiment_name}'"
              + (f"; {len(old)} cell(s) already had their card run ({', '.join(old)})." if old else "."))
        from recipe_audit.release.sweep import print_store, publish_cards

        publish_cards(uri, a.experiment_name, [doc])  # the verdicts first on the experiment's page
        print_store(uri)
    return 0

