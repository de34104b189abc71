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

from . import keys
from .commands.args import count, finite, probability


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's usage block is noise here)
        self.exit(2, f"recipe-audit: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="recipe-audit", description="Recipe cards from MLflow reruns.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    b = sub.add_parser("bound", help="the exact tail bound and verdict for k failures in N reruns")
    b.add_argument("--failures", "-k", type=count, required=True, help="failed reruns k")
    b.add_argument("--reruns", "-n", type=count, required=True, help="reruns N")
    b.add_argument("--eps", type=probability, default=0.10, help="failure budget ε (default 0.10)")
    b.add_argument("--delta", type=probability, default=0.10, help="statistical risk δ (default 0.10)")
    b.add_argument("--json", action="store_true", help="print one JSON object")

    c = sub.add_parser("card", help="compute recipe cards from an MLflow experiment")
    c.add_argument("--experiment-name", required=True)
    c.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else ./mlruns")
    c.add_argument("--metric", default=None, help=f"metric key (default {keys.DEFAULT_METRIC})")
    c.add_argument("--audit", action="append", default=None, metavar="AUDIT",
                   help="audit set; shorthand for --metric accuracy/AUDIT; repeated, the cards of several "
                        "audit sets side by side, the first as the calibration audit (SPEC 1.7)")
    c.add_argument("--all-audits", action="store_true",
                   help="a card for every audit set the reruns were scored on, side by side")
    c.add_argument("--seed-key", default="tags." + keys.TAG_SEED,
                   help="where the seed is, MLflow-style (e.g. params.seed)")
    c.add_argument("--group-by", action="extend", nargs="+", default=[], metavar="KEY",
                   help="keys that define a cell besides the recipe identity (e.g. params.model_name)")
    c.add_argument("--tau", action="extend", nargs="+", type=finite, default=[], metavar="T",
                   help="release bar(s) τ; several give a grid (default 0.7)")
    c.add_argument("--eps", type=probability, default=0.10)
    c.add_argument("--delta", type=probability, default=0.10)
    c.add_argument("--lower-is-better", action="store_true", help="the metric is a loss: fail when > τ")
    c.add_argument("--unfinished", choices=("fail", "refuse"), default="fail",
                   help="unfinished reruns count as failures (default) or refuse the card")
    c.add_argument("--recipe-id", default=None, help="only this recipe identity")
    c.add_argument("--sweep-id", default=None, help="only the reruns of this sweep")
    c.add_argument("--planned-seeds", default=None,
                   help="seeds that were planned, e.g. 'range(59)' or '0,1,2' (default: from the sweeps)")
    c.add_argument("--json", dest="json_path", type=Path, default=None, metavar="PATH")
    c.add_argument("--out", type=Path, default=None, metavar="DIR", help="write JSON, Markdown and PNGs here")
    c.add_argument("--no-log", action="store_true", help="do not log the card as MLflow runs")
    c.add_argument("--split-audit", action="store_true", help="add the held-out split audit (SPEC 1.8)")
    c.add_argument("--responsiveness", action="store_true", help="add the evidence-responsiveness plot")
    c.add_argument("--splits", type=count, default=1000, help="random splits for the split audit")
    c.add_argument("--bootstrap", type=count, default=2000, help="bootstrap resamples B")
    c.add_argument("--bootstrap-seed", type=count, default=0)
    c.add_argument("--band-method", choices=("auto", "exact-cp", "exact-ks", "dkw"), default="auto",
                   help="the simultaneous band valid for every τ (default: exact Clopper–Pearson shape)")

    for module in EXTENSIONS:
        COMMANDS.update(importlib.import_module(module).register(sub))
    return p


def _planned(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    t = text.strip()
    try:
        if t.startswith("range(") and t.endswith(")"):
            return tuple(range(*(int(x) for x in t[6:-1].split(","))))
        return tuple(int(x) for x in t.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--planned-seeds must be 'range(N)' or a comma list of integers, not {text!r}.") from None


def cmd_bound(a: argparse.Namespace) -> int:
    from .stats import tail_bound

    tb = tail_bound(a.failures, a.reruns, a.eps, a.delta)
    out = {"upper_bound": tb.upper, "lower_bound": tb.lower, "sample_floor": tb.sample_floor,
           "verdict": tb.verdict, "more_clean_reruns_needed": tb.more_clean_reruns_needed,
           "failures": tb.k, "reruns": tb.n, "eps": tb.eps, "delta": tb.delta}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{tb.k} failures in {tb.n} reruns, ε = {tb.eps}, δ = {tb.delta}:\n"
              f"  upper bound U = {tb.upper:.4f}, lower bound L = {tb.lower:.4f}, "
              f"sample floor N_min = {tb.sample_floor}\n  verdict: {tb.verdict}")
    return 0


def cmd_card(a: argparse.Namespace) -> int:
    from .cards.build import CardOptions
    from .cards.compute import CardRequest, compute_cards
    from .cards.store import log_card_runs, render_files, write_json
    from .cards.sweep import print_summary
    from .tracking import resolve_tracking_uri

    audits = list(a.audit or [])
    if a.metric and (audits or a.all_audits):
        raise ValueError("Give --metric or --audit/--all-audits, not both.")
    metric = a.metric or keys.accuracy_key(audits[0] if audits else keys.DEFAULT_AUDIT)
    uri = resolve_tracking_uri(a.tracking_uri)
    opts = CardOptions(taus=tuple(a.tau or [0.7]), eps=a.eps, delta=a.delta,
                       higher_is_better=not a.lower_is_better, unfinished=a.unfinished,
                       bootstrap_B=a.bootstrap, bootstrap_seed=a.bootstrap_seed, band_method=a.band_method)
    req = CardRequest(experiment=a.experiment_name, metric=metric, tracking_uri=uri, seed_key=a.seed_key,
                      group_by=tuple(a.group_by), recipe_id=a.recipe_id, sweep_id=a.sweep_id,
                      planned_seeds=_planned(a.planned_seeds))
    shift = a.all_audits or len(audits) > 1
    if shift:  # SPEC 1.7: one card per audit set, side by side
        from .cards.shift import compute_shift_cards, scored_audit_sets

        if a.all_audits:
            audits = [*audits, *(x for x in scored_audit_sets(req) if x not in audits)]
        doc = compute_shift_cards(req, opts, audits, split_audit=a.split_audit,
                                  responsiveness=a.responsiveness, n_splits=max(a.splits, 1))
    else:
        doc = compute_cards(req, opts, split_audit=a.split_audit, responsiveness=a.responsiveness,
                            n_splits=max(a.splits, 1))
    files = render_files(doc, a.out) if a.out else None
    if a.json_path:
        write_json(doc, a.json_path)
    print_summary(doc, files)
    if shift:
        from .cards.render import text_table
        from .cards.shift import shift_table

        header, rows = shift_table(doc["shift"], markdown=False)
        print("\nShift (SPEC 1.7): calibration audit vs target audits\n" + text_table(rows, header))
    if not a.no_log:
        runs = log_card_runs(doc, uri, a.experiment_name)
        print(f"Logged {len(runs)} card run(s) to experiment '{a.experiment_name}'.")
    return 0


COMMANDS = {"bound": cmd_bound, "card": cmd_card}

# More subcommands live in their own modules: each has ``register(subparsers)`` that adds its
# parsers (created with ``subparsers.add_parser``) and returns ``{command name: handler}``; a
# handler takes the parsed ``argparse.Namespace`` and returns the exit status. Handlers signal
# bad input by raising ``ValueError`` (or a subclass) with one sentence.
EXTENSIONS: tuple[str, ...] = ("recipe_audit.commands.acceptance", "recipe_audit.commands.registry")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .cards.build import CardError
    from .query import QueryError
    from .stats import StatsInputError
    from .tracking import TrackingError

    try:
        return COMMANDS[args.command](args)
    except (CardError, QueryError, StatsInputError, TrackingError, ValueError) as exc:
        print(f"recipe-audit: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
