"""The Python API: the calls a notebook needs, thin typed wrappers over the command line's code.

``import recipe_audit`` gives them (imported on first use, so the import stays fast):

* :func:`bound` and :func:`verdict`: the card's statistics for ``k`` failures in ``N`` reruns;
* :func:`card`: the recipe card of the reruns in an MLflow experiment (``recipe-audit card``);
* :func:`card_from_runs`: the card of a table of runs (a pandas DataFrame: your own results, or
  ``mlflow.search_runs(...)``), no tracking store needed;
* :func:`attach` and :func:`gate`: cards on a registered model version and the release gate
  (``recipe-audit attach`` / ``gate``).

Every call raises ``ValueError`` (a subclass naming what is wrong, in one sentence) on bad input.

>>> import recipe_audit
>>> b = recipe_audit.bound(6, 59)
>>> round(b.upper, 3), b.sample_floor, b.verdict
(0.172, 22, 'unsupported')
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipe_audit.stats.options import AuditOptions, option_fields, refuse_unknown

if TYPE_CHECKING:
    import pandas as pd

    from recipe_audit.cards.document import RecipeCard
    from recipe_audit.release.gate import GateResult
    from recipe_audit.release.registry import AttachResult
    from recipe_audit.stats.anytime import AnytimeBound
    from recipe_audit.stats.exact import TailBound
    from recipe_audit.stats.family import FamilyMember

__all__ = ["Card", "attach", "bound", "card", "card_from_runs", "gate", "verdict"]



def _budget(eps: Any, delta: Any, family_size: Any = None, anytime: Any = False) -> dict[str, Any]:
    """ε, δ, M and the anytime reading through the one validator of every door (the same words as
    ``recipe-audit bound``'s and the Hydra callback's)."""
    from recipe_audit.stats.options import audit_options

    return audit_options(eps=eps, delta=delta, family_size=family_size, anytime=anytime)


def bound(failures: int, reruns: int, eps: float = AuditOptions.eps, delta: float = AuditOptions.delta, *,
          family_size: int | None = AuditOptions.family_size,
          anytime: bool = AuditOptions.anytime) -> TailBound | FamilyMember | AnytimeBound:
    """The exact bounds on the probability that the next rerun fails, for ``failures`` (k)
    failed reruns out of ``reruns`` (N): the one-sided Clopper–Pearson upper bound ``upper`` (U)
    and lower bound ``lower`` (L) at confidence 1 − δ, the sample floor ``sample_floor`` (N_min,
    the fewest reruns that can certify the failure budget ε at all), the ``verdict`` and
    ``more_clean_reruns_needed``. ``recipe-audit bound`` prints the same.

    >>> b = bound(0, 22)
    >>> round(b.upper, 4), b.verdict
    (0.0994, 'release-supported')
    >>> bound(0, 21).verdict            # below the sample floor: nothing is certified
    'insufficient-evidence'
    >>> bound(6, 59).more_clean_reruns_needed     # clean reruns that would make it supported
    45

    ``family_size=M`` (the recipe was chosen from M) or ``anytime=True`` (an open-ended sweep)
    asks for that reading instead: its ``verdict``, ``upper``, ``lower`` and ``sample_floor`` are
    the family-wise or anytime ones, the pointwise ones beside them as ``pointwise_verdict``,
    ``pointwise_upper``, ... (``recipe-audit bound --family-size M`` / ``--anytime``). ``eps`` and
    ``delta`` may be given as text (``"0.31381059609"``) to keep every decimal.

    >>> b = bound(2, 59, family_size=10)
    >>> b.verdict, b.pointwise_verdict
    ('unsupported', 'release-supported')
    """
    opts = _budget(eps, delta, family_size, anytime)
    if opts["family_size"] is not None and opts["anytime"]:
        raise ValueError("Give family_size or anytime, not both: a bound reads either a recipe chosen from a "
                         "family or an open-ended sweep.")
    if opts["family_size"] is not None:
        from recipe_audit.stats.family import family_tail_bound

        return family_tail_bound(failures, reruns, opts["eps"], opts["delta"], opts["family_size"])
    if opts["anytime"]:
        from recipe_audit.stats.anytime import anytime_bound

        return anytime_bound(failures, reruns, opts["eps"], opts["delta"])
    from recipe_audit.stats.exact import tail_bound

    return tail_bound(failures, reruns, opts["eps"], opts["delta"])


def verdict(failures: int, reruns: int, eps: float = AuditOptions.eps, delta: float = AuditOptions.delta) -> str:
    """The card's verdict for ``failures`` of ``reruns``: ``release-supported`` (U ≤ ε and N ≥
    N_min), ``unsupported``, ``strong-unsupported`` (even L > ε) or ``insufficient-evidence``
    (N < N_min).

    >>> verdict(1, 38), verdict(2, 38), verdict(12, 30)
    ('release-supported', 'unsupported', 'strong-unsupported')
    """
    from recipe_audit.stats.exact import verdict as _verdict

    opts = _budget(eps, delta)
    return _verdict(failures, reruns, opts["eps"], opts["delta"])


@dataclass(frozen=True)
class Card:
    """A recipe card: ``card`` is the typed card (:class:`recipe_audit.cards.document.RecipeCard`);
    :attr:`doc` its JSON (what ``card.json`` holds, validated against the JSON Schema
    ``recipe_audit/schemas/recipe_card.v1.json``). ``Card(doc)`` of a card's JSON reads it
    (``RecipeCard.from_json``). In a notebook (and as ``repr``) a card shows its verdict table;
    :meth:`markdown` is the whole card, :meth:`table` the verdicts as a DataFrame."""

    card: RecipeCard

    def __post_init__(self) -> None:
        if isinstance(self.card, dict):
            from recipe_audit.cards.document import RecipeCard

            object.__setattr__(self, "card", RecipeCard.from_json(self.card))

    @cached_property
    def doc(self) -> dict[str, Any]:
        """The card document: ``card.to_json()``."""
        return self.card.to_json()

    @property
    def cells(self) -> list[dict[str, Any]]:
        """One entry per cell (recipe, group, audit set) and τ: ``n_reruns``, ``n_failures``,
        ``upper_bound``, ``lower_bound``, ``verdict``, ``rules``, ``reason``, ... (the typed
        entries: ``card.cells``)."""
        return self.doc["cells"]

    @property
    def verdict(self) -> str:
        """The verdict of a card with one cell at one τ (else ``ValueError``: read :attr:`cells`)."""
        if len(self.card.cells) != 1:
            raise ValueError(f"This card has {len(self.card.cells)} entries (cells × τ); read .cells or .table().")
        return self.card.cells[0].verdict

    def table(self) -> pd.DataFrame:
        """The verdicts as a DataFrame, one row per cell and τ."""
        import pandas as pd

        cols = ("label", "audit_set", "tau", "n_reruns", "n_failures", "upper_bound", "lower_bound", "verdict")
        return pd.DataFrame([{c: e.get(c) for c in cols} for e in self.cells], columns=list(cols))

    def markdown(self) -> str:
        """The card for people, as ``card.md`` has it (without the pictures)."""
        from recipe_audit.cards.render import to_markdown

        return to_markdown(self.card)

    def summary(self) -> str:
        """The verdicts in a few lines of Markdown (what a notebook shows): the metric, ε and δ,
        one row per cell and τ (recipe, τ, failures / N, U, verdict), the family-wise verdicts
        first when the card has a family."""
        from recipe_audit.cards.summary import summary_markdown

        return summary_markdown([self.card]).rstrip() + "\n\nThe whole card: `.markdown()`; the verdicts as a DataFrame: `.table()`."

    def _repr_markdown_(self) -> str:  # Jupyter: the verdict table, not the whole card
        return self.summary()

    def __repr__(self) -> str:
        from recipe_audit.cards.render import GRID_HEADER, verdict_table
        from recipe_audit.cards.tables import text_table

        o, n = self.card.options, len(self.card.cells)
        return (f"<recipe card on {self.card.source.get('metric')} (ε = {o['eps']:g}, δ = {o['delta']:g}), "
                f"{n} {'entry' if n == 1 else 'entries'}; .markdown() for the whole card>\n"
                + text_table(verdict_table(self.card), GRID_HEADER))

    def save(self, directory: str | Path) -> dict[str, Path]:
        """Write the card's files (``card.json``, ``card.md``, ``card.html``, the plots) into
        ``directory``; returns them by kind."""
        from recipe_audit.cards.files import render_files

        return render_files(self.card, Path(directory))


def _options(func: str, options: dict[str, Any], metric: str):
    """The card's audit options (``options``: the keywords the call was given beside its own) through
    the one validator every door uses (recipe_audit.stats.options); a keyword that is none of them is
    a ``TypeError``, as Python's own for ``func``."""
    from recipe_audit.cards.model import CardOptions

    refuse_unknown(options, func)
    return CardOptions.from_config(options, metrics=[metric])


def _audit_keywords(func):
    """``func`` takes the audit options as keywords (``**options``), each as
    :class:`~recipe_audit.stats.options.AuditOptions` declares it: its signature (``help()``, the
    reference docs) shows them, keyword-only, with their defaults, after its own."""
    sig = inspect.signature(func)
    own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    declared = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
                for f in option_fields()]
    func.__signature__ = sig.replace(parameters=[*own, *declared])
    return func


@_audit_keywords
def card(experiment: str, metric: str | None = None, *, tracking_uri: str | None = None,
         seed_key: str | None = None, group_by: Sequence[str] = (), recipe_id: str | None = None,
         sweep_id: str | None = None, planned_seeds: Sequence[int] | None = None, **options: Any) -> Card:
    """The recipe card of the reruns in MLflow experiment ``experiment`` (``recipe-audit card``,
    without writing or logging anything).

    ``metric`` defaults to recipe_audit's own ``accuracy/calibration``; ``seed_key`` to the
    ``recipe_audit.seed`` tag of its reruns. For runs your own code logged, name your keys
    MLflow-style: ``card("my-exp", "val_acc", seed_key="params.seed")``. ``tracking_uri``
    defaults to ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlruns/mlflow.db``. A metric, audit
    set, seed key or group key that no run has is a ``ValueError`` naming what the runs do have,
    as ``recipe-audit card`` says it; a τ beyond every value logged is allowed and noted (a
    ``UserWarning``). The audit options are keywords (``taus``, ``eps``, ``delta``, ``family_size``,
    ``anytime``, ``unfinished``, ``higher_is_better``: every field of
    :class:`~recipe_audit.stats.options.AuditOptions`, with its default), as ``recipe-audit card``'s
    ``--tau``, ``--eps``, ...

    >>> import tempfile, mlflow
    >>> tmp = tempfile.TemporaryDirectory()
    >>> uri = f"sqlite:///{tmp.name}/mlflow.db"
    >>> client = mlflow.MlflowClient(uri)
    >>> exp = client.create_experiment("mine", artifact_location=f"{tmp.name}/artifacts")
    >>> for seed in range(30):          # 30 runs of your own training code, one collapsed
    ...     run_id = client.create_run(exp).info.run_id
    ...     client.log_batch(run_id, params=[mlflow.entities.Param("seed", str(seed))],
    ...                      metrics=[mlflow.entities.Metric("val_acc", 0.5 if seed == 7 else 0.9, 0, 0)])
    ...     client.set_terminated(run_id)
    >>> c = card("mine", "val_acc", seed_key="params.seed", tracking_uri=uri)
    >>> e = c.cells[0]
    >>> (e["n_failures"], e["n_reruns"], round(e["upper_bound"], 3), e["verdict"])
    (1, 30, 0.124, 'unsupported')
    >>> tmp.cleanup()
    """
    import warnings

    from recipe_audit import keys
    from recipe_audit.commands import card_input as check
    from recipe_audit.release.compute import CardRequest, compute_card, read_card_runs
    from recipe_audit.store.tracking import resolve_tracking_uri

    if not isinstance(experiment, str) or not experiment.strip():
        raise ValueError("experiment must name an MLflow experiment.")
    if metric is not None and (not isinstance(metric, str) or not metric.strip()):
        raise ValueError("metric must name a metric key.")
    default_metric = metric is None  # as the command line without --metric: an audit set is asked for
    metric = metric or keys.DEFAULT_METRIC
    opts = _options("card", options, metric)
    uri = resolve_tracking_uri(tracking_uri)
    check.tracking_uri(uri, will_log=False)
    req = CardRequest(experiment=experiment, metric=metric, tracking_uri=uri,
                      seed_key=seed_key or "tags." + keys.TAG_SEED, group_by=tuple(group_by),
                      recipe_id=recipe_id, sweep_id=sweep_id,
                      planned_seeds=None if planned_seeds is None else tuple(planned_seeds))
    # what only the store knows, checked as the command line checks it: one read, then the card
    runs = read_card_runs(req, opts)
    notes = check.store(uri, experiment, [metric], seed_key=req.seed_key, group_by=list(group_by),
                        taus=opts.taus, higher_is_better=opts.higher_is_better,
                        audits_named=default_metric, frame=runs.frame)
    for note in notes:
        warnings.warn(note, UserWarning, stacklevel=2)
    return Card(compute_card(req, opts, runs=runs))


def _column(frame: pd.DataFrame, name: str, what: str, prefixes: Sequence[str]) -> str:
    """The column of ``frame`` that ``name`` names (as given, or after one of ``prefixes``); else
    one sentence that lists what it could have been. For a metric: the metric columns the reruns
    have a value in (not those only recipe_audit's card and sweep runs fill, which
    ``mlflow.search_runs`` of an experiment brings along), the closest names first; then the
    other columns. For other keys: every column, the closest first."""
    import pandas as pd

    from recipe_audit import keys
    from recipe_audit.errors import closest_first

    for candidate in (name, *(p + name for p in prefixes)):
        if candidate in frame.columns:
            return candidate
    cols = [str(c) for c in frame.columns]
    first: list[str] = []
    if what == "metric":
        kind = "tags." + keys.TAG_KIND
        reruns = frame[~frame[kind].isin([keys.KIND_CARD, keys.KIND_SWEEP])] if kind in frame.columns else frame
        logged = [c for c in cols if c.startswith(tuple(prefixes)) or pd.api.types.is_numeric_dtype(frame[c])]
        first = closest_first(name, [c for c in logged if reruns[c].notna().any()], tuple(prefixes))
    rest = closest_first(name, [c for c in cols if c not in first], tuple(prefixes))
    listed = first + rest
    shown = ", ".join(repr(c) for c in listed[:8]) + (f" and {len(listed) - 8} more" if len(listed) > 8 else "")
    which = ("the reruns' metric columns first, the closest first" if first and rest else "the closest first"
             if len(listed) > 1 else "")
    raise ValueError(f"The runs have no {what} column {name!r}; their columns{f' ({which})' if which else ''} "
                     f"are {shown}.")


@_audit_keywords
def card_from_runs(runs: pd.DataFrame, metric: str, *, seed: str = "seed", group_by: Sequence[str] = (),
                   planned_seeds: Sequence[int] | None = None, **options: Any) -> Card:
    """The recipe card of a table of runs, one row per run: no tracking store needed.

    ``metric`` and ``seed`` name columns (``val_acc`` also finds ``metrics.val_acc``, ``seed``
    also ``params.seed``, as ``mlflow.search_runs`` names them). Optional columns: ``status``
    (MLflow's; a run that is not ``FINISHED`` is unfinished and counts as a failure, as does a
    missing or NaN metric), ``run_id``, ``start_time`` (which rerun of a seed run twice is the
    latest). Rows with equal ``group_by`` values are one cell; a seed run more than once counts
    its worst result. ``planned_seeds``: seeds that should have run (a missing one counts as a
    failure). The audit options are keywords, as for :func:`card` (``taus``, ``eps``, ``delta``, ...).

    >>> import pandas as pd
    >>> runs = pd.DataFrame({"seed": range(59), "accuracy": [0.5] * 6 + [0.85] * 53})
    >>> c = card_from_runs(runs, "accuracy")
    >>> e = c.cells[0]
    >>> (e["n_failures"], e["n_reruns"], round(e["upper_bound"], 3), c.verdict)
    (6, 59, 0.172, 'unsupported')
    >>> rules = e["rules"]
    >>> rules["mean"], rules["card"]      # the mean ships; the card does not
    (True, False)
    >>> card_from_runs(runs, "accuracy", taus=[0.4, 0.7]).table()[["tau", "n_failures", "verdict"]]
       tau  n_failures            verdict
    0  0.4           0  release-supported
    1  0.7           6        unsupported
    """
    import numpy as np
    import pandas as pd

    from recipe_audit.cards.build import build_card
    from recipe_audit.cards.model import cell_from_rerun_set
    from recipe_audit.reruns import collect_reruns

    if not isinstance(runs, pd.DataFrame):
        raise ValueError(f"runs must be a pandas DataFrame, not {type(runs).__name__}.")
    if runs.empty:
        raise ValueError("There are no runs to make a card from.")
    metric_col = _column(runs, metric, "metric", ("metrics.",))
    seed_col = _column(runs, seed, "seed", ("params.", "tags."))
    groups = [_column(runs, g, "group", ("params.", "tags.")) for g in group_by]
    values = pd.to_numeric(runs[metric_col], errors="coerce").to_numpy(dtype=float)
    name = metric_col.removeprefix("metrics.")  # how the card names the metric
    n = len(runs)
    start = runs["start_time"] if "start_time" in runs.columns else pd.Series(range(n))
    if pd.api.types.is_datetime64_any_dtype(start):
        start = start.map(lambda t: None if pd.isna(t) else int(t.timestamp() * 1000))
    frame = pd.DataFrame({
        "run_id": runs["run_id"].astype(str).to_numpy() if "run_id" in runs.columns else [f"row{i}" for i in range(n)],
        "status": runs["status"].to_numpy() if "status" in runs.columns else ["FINISHED"] * n,
        "start_time": pd.array(list(start), dtype="Int64"),
        "seed": runs[seed_col].to_numpy(dtype=object),
        "recipe_id": [None] * n,
        name: values,
        f"logged[{name}]": ~np.isnan(values),
        **{g: runs[g].to_numpy(dtype=object) for g in groups},
    })
    opts = _options("card_from_runs", options, name)
    sets = collect_reruns(frame, name, higher_is_better=opts.higher_is_better, group_by=groups,
                          planned_seeds=None if planned_seeds is None else tuple(planned_seeds))
    cells = [cell_from_rerun_set(rs, "") for rs in sets]
    source = {"experiment": None, "metric": name, "seed_key": seed_col, "group_by": groups,
              "planned_seeds": None if planned_seeds is None else list(planned_seeds)}
    return Card(build_card(cells, opts, source))


def _uri(tracking_uri: str | None) -> str:
    from recipe_audit.store.tracking import resolve_tracking_uri

    return resolve_tracking_uri(tracking_uri)


def attach(model_name: str, card: Card | dict[str, Any] | str | Path, *, version: str | int | None = None,
           run_id: str | None = None, tracking_uri: str | None = None, audits: Sequence[str] = (),
           taus: Sequence[float] = (), recipe_id: str | None = None, set_alias: str | None = None,
           signing_key: str | None = None) -> AttachResult:
    """Attach ``card`` (a :class:`Card`, a card document, or a path or artifact URI of
    ``card.json``) to version ``version`` of registered model ``model_name``, or register the model
    rerun ``run_id`` logged as a new version first (``recipe-audit attach``). The card must verify
    against the tracking store; ``audits``, ``taus`` and ``recipe_id`` narrow the cells attached.
    ``signing_key`` (a PEM file; else ``$RECIPE_AUDIT_SIGNING_KEY``): sign what is attached.
    Returns what was attached (``.version``, ``.cards``, ``.card_run_ids``)."""
    from recipe_audit.cards.signing import SigningKey
    from recipe_audit.release.registry import attach as _attach

    uri = _uri(tracking_uri)
    files = None
    if isinstance(card, (str, Path)):
        from recipe_audit.release.card_files import read_card

        files = read_card(str(card), uri)
        doc = files.doc
    else:
        doc = card.doc if isinstance(card, Card) else card
    signer = SigningKey.load(signing_key) if signing_key else SigningKey.from_environment()
    return _attach(uri, model_name, doc, version=None if version is None else str(version), run_id=run_id,
                   audits=list(audits), taus=list(taus), recipe_id=recipe_id, set_alias=set_alias, card=files,
                   signer=signer)


def gate(model_name: str, *, version: str | int | None = None, alias: str | None = None,
         audit: str | None = None, tau: float | None = None, max_eps: float | None = None,
         max_delta: float | None = None, metric: str | None = None, higher_is_better: bool | None = None,
         family: Sequence[str] | None = None, pointwise: bool | None = None, experiment: str | None = None,
         policy: str | None = None, tracking_uri: str | None = None, trusted_key: str | None = None) -> GateResult:
    """The release gate (``recipe-audit gate``), under the gate's own policy: the bar ``tau`` and
    the ``audit`` set (or ``metric``) are required (here or in the ``policy`` file), ε ≤
    ``max_eps`` and δ ≤ ``max_delta`` (default 0.1 each), ``higher_is_better`` (default True),
    the ``family`` (default: every recipe identity of the experiment). ``.passed`` is True only
    when the gate's recomputation over every rerun of the version's recipe in the store is
    ``release-supported`` and the attached card covers exactly those reruns and verifies.
    ``.outcome`` and ``.message`` say why not; ``.evidence`` what was recomputed. ``trusted_key``
    (else the ``policy`` file's ``trusted_key``): the public key (PEM file) whose signature the
    card must carry, over its files and the reruns the store holds now."""
    from recipe_audit.cards.signing import TrustedKey
    from recipe_audit.release.evidence import load_policy_file, make_policy, policy_trusted_key
    from recipe_audit.release.gate import gate as _gate

    flags = {"tau": tau, "audit": audit, "metric": metric, "higher_is_better": higher_is_better, "max_eps": max_eps,
             "max_delta": max_delta, "family": None if family is None else list(family), "pointwise": pointwise,
             "experiment": experiment}
    file = load_policy_file(policy) if policy else None
    pol = make_policy(flags, file, file_name=f"policy file {policy}")
    key = trusted_key or policy_trusted_key(file, policy)
    return _gate(_uri(tracking_uri), model_name, pol, version=None if version is None else str(version), alias=alias,
                 trusted=TrustedKey.load(key) if key else None)
