"""``recipe-audit``: post-hoc commands over a tracking store (no retraining).

    recipe-audit bound --failures 6 --reruns 59 --json
    recipe-audit card --experiment-name recipe_audit --tau 0.7 0.8 --json card.json

The command-line contract (option names, JSON keys, verdict strings, exit codes) is stable:
0 on success, 2 on bad input with one sentence on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from recipe_audit import keys
from recipe_audit.commands.args import (
    TRACKING_URI_HELP,
    budget_eps,
    count,
    failures,
    family_size,
    finite,
    reruns,
    risk,
    whole,
)
from recipe_audit.errors import first_line, stdout_gone
from recipe_audit.stats.options import AuditOptions
from recipe_audit.store.uris import secret_in_uri


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's usage block is noise here)
        self.exit(2, f"recipe-audit: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand. Building it imports nothing heavy: the modules that compute
    are imported by the handlers, so ``--help`` and ``bound`` answer at once."""
    p = _Parser(prog="recipe-audit", description="Recipe cards from MLflow reruns.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    b = sub.add_parser("bound", help="the exact tail bound and verdict for k failures in N reruns",
                       description="The one-sided exact (Clopper–Pearson) bounds U and L on the next rerun's "
                                   "failure probability, the sample floor N_min and the verdict, for k failures "
                                   "in N reruns. Counts go up to 10^15.")
    b.add_argument("--failures", "-k", type=failures, required=True, help="failed reruns k (0 <= k <= N)")
    b.add_argument("--reruns", "-n", type=reruns, required=True, help="reruns N (1 to 10^15)")
    b.add_argument("--eps", type=budget_eps, default=AuditOptions.eps,
                   help=f"failure budget ε, strictly between 0 and 1 (default {AuditOptions.eps:.2f})")
    b.add_argument("--delta", type=risk, default=AuditOptions.delta,
                   help=f"statistical risk δ, strictly between 0 and 0.5 (default {AuditOptions.delta:.2f})")
    b.add_argument("--family-size", type=family_size, default=AuditOptions.family_size, metavar="M",
                   help="the recipe was chosen from M recipe identities (a grid, the best of several): "
                        "the family-wise bounds at risk δ/M, floor and verdict lead (they hold whichever "
                        "recipe was chosen; --json: the top-level keys), the pointwise ones follow "
                        "(--json: under 'pointwise')")
    b.add_argument("--anytime", action="store_true",
                   help="the reruns come from a sweep that added seeds until the card looked good: the "
                        "confidence sequence's bounds U_n and L_n (valid at every N at once), floor and verdict "
                        "lead (--json: the top-level keys), the pointwise ones follow (--json: under 'pointwise')")
    b.add_argument("--json", action="store_true", help="print one JSON object")

    c = sub.add_parser("card", help="compute recipe cards from an MLflow experiment",
                       description="The recipe cards of an experiment's reruns, from the tracking store alone: "
                                   "for each recipe and audit set (or --metric) at each bar τ, the failures k of "
                                   "N reruns, the exact upper bound U on the next rerun's failure probability, "
                                   "the sample floor N_min and the verdict. A rerun that did not finish counts "
                                   "as a failure.")
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
    c.add_argument("--tau", action="extend", nargs="+", type=finite, default=[], metavar="T",
                   help=f"release bar(s) τ; several give a grid (default {' '.join(f'{x:g}' for x in AuditOptions.taus)}); for the accuracy metrics "
                        "(accuracy/AUDIT) τ must lie in [0, 1]; a τ beyond every value the reruns "
                        "logged is allowed and noted")
    c.add_argument("--eps", type=budget_eps, default=AuditOptions.eps,
                   help=f"failure budget ε, strictly between 0 and 1 (default {AuditOptions.eps:.2f})")
    c.add_argument("--delta", type=risk, default=AuditOptions.delta,
                   help=f"statistical risk δ, strictly between 0 and 0.5 (default {AuditOptions.delta:.2f})")
    c.add_argument("--lower-is-better", action="store_true", help="the metric is a loss: fail when > τ")
    c.add_argument("--unfinished", default=AuditOptions.unfinished, metavar="{fail,refuse}",
                   help="unfinished reruns count as failures (fail, the default) or refuse the card")
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
    c.add_argument("--family-size", type=family_size, default=AuditOptions.family_size, metavar="M",
                   help="the recipes were chosen from a family of M identities (default: the identities the card "
                        "covers on each audit set and τ, plus the experiment's or sweep's others); with M > 1 every "
                        "cell states the family-wise verdict (Holm, δ/M) beside the pointwise one")
    c.add_argument("--anytime", action="store_true",
                   help="read every cell as an open-ended sweep (seeds added until the card looked good): the "
                        "confidence sequence's U_n and L_n, valid at every N at once (a sweep run with "
                        "hydra.sweeper.stop_on=anytime is read so without it)")
    c.add_argument("--band-method", choices=("auto", "exact-cp", "exact-ks", "dkw"), default="auto",
                   help="the simultaneous band valid for every τ (default auto: the exact Clopper–Pearson "
                        "shape up to 2000 reruns, the exact KS band up to 20000, DKW beyond)")

    for module in EXTENSIONS:
        COMMANDS.update(importlib.import_module(module).register(sub))
    return p


SPLITS_MAX = 100_000
BOOTSTRAP_MAX = 100_000


def _bounds_text(upper: float, lower: float, eps: float, verdict: str, u: str = "U", lo: str = "L") -> str:
    """``U = …, L = …`` printed so that neither reads on the other side of ε than the verdict says."""
    from recipe_audit.stats.exact import STRONG_UNSUPPORTED, SUPPORTED, shown_beside

    return (f"{u} = {shown_beside(upper, eps, above=verdict != SUPPORTED)}, "
            f"{lo} = {shown_beside(lower, eps, above=verdict == STRONG_UNSUPPORTED)}")


def _family_or_anytime(a: argparse.Namespace, what: str) -> None:
    if a.family_size is not None and a.anytime:
        raise ValueError(f"Give --family-size or --anytime, not both: {what} reads either a recipe chosen "
                         "from a family or an open-ended sweep.")


def cmd_bound(a: argparse.Namespace) -> int:
    from recipe_audit.stats.exact import tail_bound  # pure Python: no NumPy, SciPy or pandas to import
    from recipe_audit.stats.options import check_budget

    _family_or_anytime(a, "a bound")
    check_budget(a.eps, a.delta, a.family_size, a.anytime)
    tb = tail_bound(a.failures, a.reruns, a.eps, a.delta)
    pointwise = {"upper_bound": tb.upper, "lower_bound": tb.lower, "sample_floor": tb.sample_floor,
                 "verdict": tb.verdict, "more_clean_reruns_needed": tb.more_clean_reruns_needed}
    counts = {"failures": tb.k, "reruns": tb.n, "eps": tb.eps, "delta": tb.delta}
    more = tb.more_clean_reruns_needed
    pw_line = (f"upper bound {_bounds_text(tb.upper, tb.lower, tb.eps, tb.verdict).replace(', L', ', lower bound L')}, "
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
                f"{_bounds_text(fb.upper, fb.lower, tb.eps, fb.verdict)}, family-wise floor {fb.sample_floor}\n"
                f"  family-wise verdict: {fb.verdict}"
                + (f" ({fmore} more clean reruns would make it release-supported)"
                   if fmore and fb.verdict != "release-supported" else "")
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
                f"sequence {_bounds_text(ab.upper, ab.lower, tb.eps, ab.verdict, 'U_n', 'L_n')}, "
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


#: How ``recipe-audit card`` names each audit option in a sentence of the one validator.
CLI_OPTION_NAMES = {"taus": "--tau", "eps": "--eps", "delta": "--delta", "family_size": "--family-size",
                    "anytime": "--anytime", "unfinished": "--unfinished", "higher_is_better": "--lower-is-better"}


def cmd_card(a: argparse.Namespace) -> int:
    from recipe_audit.commands import card_input as check
    from recipe_audit.store.tracking import resolve_tracking_uri

    # what the options alone decide, before the store is read
    if not a.experiment_name.strip():
        raise ValueError("--experiment-name must name an experiment.")
    _family_or_anytime(a, "a card")
    audits = list(a.audit or [])
    check.audit_names(audits)
    if a.metric is not None and not a.metric.strip():
        raise ValueError("--metric must name a metric key.")
    if a.metric and (audits or a.all_audits):
        raise ValueError("Give --metric or --audit/--all-audits, not both.")
    metric = a.metric or keys.accuracy_key(audits[0] if audits else keys.DEFAULT_AUDIT)
    shift = a.all_audits or len(audits) > 1
    metrics = [keys.accuracy_key(x) for x in dict.fromkeys(audits)] if shift and audits else [metric]
    taus = tuple(a.tau or AuditOptions.taus)
    from recipe_audit.cards.model import CardOptions

    # the one validator of every door (recipe_audit.stats.options): ranges, τ for accuracies, the budget
    opts = CardOptions.from_config(taus=taus, eps=a.eps, delta=a.delta,
                                   higher_is_better=not a.lower_is_better, unfinished=a.unfinished,
                                   bootstrap_B=a.bootstrap, bootstrap_seed=a.bootstrap_seed,
                                   band_method=a.band_method, family_size=a.family_size, anytime=a.anytime,
                                   metrics=metrics if not a.all_audits else [*metrics, keys.DEFAULT_METRIC],
                                   name=CLI_OPTION_NAMES.get)
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
                        higher_is_better=not a.lower_is_better, audits_named=bool(audits) or not a.metric,
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


COMMANDS = {"bound": cmd_bound, "card": cmd_card}

# More subcommands live in their own modules: each has ``register(subparsers)`` that adds its
# parsers (created with ``subparsers.add_parser``) and returns ``{command name: handler}``; a
# handler takes the parsed ``argparse.Namespace`` and returns the exit status. Handlers signal
# bad input by raising ``ValueError`` (or a subclass) with one sentence.
EXTENSIONS: tuple[str, ...] = ("recipe_audit.commands.acceptance", "recipe_audit.commands.registry")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 500 else text[:497] + "..."


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            args = build_parser().parse_args(argv)  # --help prints here, then exits
        except SystemExit:
            sys.stdout.flush()  # the help or usage: a reader that went away is seen here
            raise
        refused = secret_in_uri(getattr(args, "tracking_uri", None), "--tracking-uri",
                                "every local user can read it in the process list while the command runs")
        if refused:
            raise ValueError(refused)
        status = COMMANDS[args.command](args)
        sys.stdout.flush()  # inside the try: a reader that went away is seen here, not at exit
        return status
    except BrokenPipeError:
        # the reader of stdout left early (`recipe-audit bound ... | head -2`): stop quietly, with
        # the shell's status for a broken pipe
        return stdout_gone()
    except ValueError as exc:  # CardError, QueryError, StatsInputError and every input check
        print(f"recipe-audit: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except RecursionError:  # a document nested deeper than anything recipe_audit writes
        print("recipe-audit: error: the input is nested too deeply to be read (no file recipe_audit writes "
              "is nested like that).", file=sys.stderr)
        return 2
    except Exception as exc:
        # the tracking store's own errors in one sentence (the store door tells them apart)
        from recipe_audit.store.errors import store_error_sentence

        sentence = store_error_sentence(exc, _one_line)
        if sentence is None:
            raise
        print(f"recipe-audit: error: {sentence}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
