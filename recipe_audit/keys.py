"""Names shared by the writer (tracking) and the reader (query) of the MLflow store.

This is the whole contract between a sweep and a card: a rerun is an MLflow run with
``TAG_KIND == KIND_RERUN``; everything a card needs is in the tags and metrics named here.
"""

from __future__ import annotations

PREFIX = "recipe_audit."

TAG_KIND = PREFIX + "kind"  # one of the KIND_* values below
KIND_SWEEP = "sweep"  # parent run of one multirun
KIND_RERUN = "rerun"  # one seed of one recipe
KIND_CARD = "card"  # one card computation
KIND_ACCEPTANCE_CELL = "acceptance_cell"  # one defense cell x seed of experiment=acceptance
# a second copy of a run that a retried request to a tracking server created; closed at once and
# counted by no reader (recipe_audit/store/retrying.py)
KIND_DUPLICATE = "duplicate_create"
TAG_CREATE_TOKEN = PREFIX + "create_token"  # on a run created on a server: the random token that finds it again
TAG_DUPLICATE_OF = PREFIX + "duplicate_of"  # on a KIND_DUPLICATE run: the run it is a copy of

TAG_RECIPE_ID = PREFIX + "recipe_id"  # stable hash of the config without seed/audit/tracking
TAG_RECIPE_NAME = PREFIX + "recipe"  # the recipe config-group choice, for people
TAG_SEED = PREFIX + "seed"  # the rerun's seed, as a decimal string
TAG_MODEL = PREFIX + "model"
TAG_TASK = PREFIX + "task"
TAG_SWEEP_ID = PREFIX + "sweep_id"  # equal on the sweep parent and all its reruns
TAG_AUDIT_SETS = PREFIX + "audit_sets"  # comma-separated audit sets the rerun was scored on
TAG_PLANNED_SEEDS = PREFIX + "planned_seeds"  # on the sweep parent: JSON list of ints
# on the sweep parent, set when the sweep starts: "true" when its metrics are higher-is-better,
# "false" for lower-is-better (a loss); the release gate refuses a card read the other way
TAG_HIGHER_IS_BETTER = PREFIX + "higher_is_better"
TAG_ERROR = PREFIX + "error"  # on a FAILED rerun: the exception, one line
# where a rerun ran, for operators (which process on which node a dead rerun was) and the fault tests
TAG_HOST = PREFIX + "host"  # on a rerun: socket.gethostname() of its process
TAG_PID = PREFIX + "pid"  # on a rerun: its process id (the main process under accelerate launch)
TAG_SLURM_JOB_ID = PREFIX + "slurm_job_id"  # on a rerun run by SLURM: $SLURM_JOB_ID
# on the sweep parent: the torch threads each rerun trains on (0: torch's own choice), and the
# logged line saying why (threads=auto decides once a sweep: recipe_audit/app/threads.py); on a
# rerun of the built-in trainer: the threads it trained on
TAG_THREADS = PREFIX + "threads"
TAG_THREADS_REASON = PREFIX + "threads_reason"
# on a rerun: the CUDA_VISIBLE_DEVICES it ran with, when the sweep placed its reruns on GPUs; on the
# sweep parent: the logged line saying how (recipe_audit/app/devices.py). Never on a machine without GPUs
TAG_DEVICES = PREFIX + "devices"
TAG_DEVICES_REASON = PREFIX + "devices_reason"
TAG_SWEEP_RUN_ID = PREFIX + "sweep_run_id"  # on a card run: the sweep parent it belongs to
TAG_PARENT = "mlflow.parentRunId"  # MLflow's own nesting tag
# on the sweep parent of a curtailing sweep (recipe_audit/app/curtailing.py): the JSON record of where each
# recipe stopped and why (or CURTAILMENT_ARTIFACT_PREFIX + the parent's artifact holding it), and
# one line for people
TAG_CURTAILMENT = PREFIX + "curtailment"
TAG_CURTAIL_SUMMARY = PREFIX + "curtailment_summary"
CURTAILMENT_ARTIFACT_PREFIX = "artifact:"
# how the error tag of a rerun recorded FAILED for want of the card's metric begins (the job ended
# without raising, and logged and returned no such metric): a card reader tells it from a crash by it
NO_METRIC_ERROR_LEAD = "the task returned "

METRIC_TRAIN_LOSS = "train_loss"  # logged with step
METRIC_TRAIN_SECONDS = "train_seconds"


def fails_tag(metric: str, tau: float) -> str:
    """The tag that says whether a rerun fails the release bar τ on ``metric`` (value ``true`` or
    ``false``): ``recipe_audit.fails.<metric>.tau_<τ>``, e.g.
    ``recipe_audit.fails.accuracy/calibration.tau_0.7``. One name wherever it is written (the sweep
    tags each rerun as it ends; a card logged later tags its reruns at its own τ), always with the
    metric: the same rerun can be on cards of several metrics, whose bars must not overwrite each
    other. A rerun that did not finish, or has no value, fails every bar, as the card counts it."""
    return f"{PREFIX}fails.{metric}.tau_{float(tau):g}"


# what sweeps on one metric wrote before fails_tag (no metric in the name): recipe_audit.fails_tau_<τ>
LEGACY_FAILS_TAG_PREFIX = PREFIX + "fails_tau_"


def accuracy_key(audit_set: str) -> str:
    """Metric key of the final accuracy of a rerun on one audit set."""
    return f"accuracy/{audit_set}"


TASK_SHIFT_SEP = "/"


def task_shift_audit(task: str, audit_set: str) -> str:
    """Name of another task's audit set when a rerun is scored on it (a *task shift*,
    ``audit.extra_tasks``): ``<task>/<audit set>``, e.g. ``entailment/calibration``; its metric is
    ``accuracy/entailment/calibration``. The slash keeps metric and tag keys valid in MLflow on
    every platform (a colon is refused on Windows) and cannot clash with a task's own audit sets,
    whose names have no slash."""
    return f"{task}{TASK_SHIFT_SEP}{audit_set}"


def majority_rate_key(audit_set: str) -> str:
    """Metric key of the audit set's majority-class rate (accuracy of a constant predictor)."""
    return f"majority_rate/{audit_set}"


def constant_fraction_key(audit_set: str) -> str:
    """Metric key of the share of the rerun's predictions that equal its most common prediction."""
    return f"pred_mode_share/{audit_set}"


# Cards attached to registered model versions (``recipe-audit attach``; ``registry.py``). One card
# = one (audit set, τ); its tags are ``<CARD_TAG_PREFIX><audit set>.tau_<τ>.<field>``, e.g.
# ``recipe_audit.card.calibration.tau_0.7.verdict``, and the card's own ``audit_set`` and ``tau``
# fields hold the exact values (a reader groups tags by everything before the last dot).
CARD_TAG_PREFIX = PREFIX + "card."


def card_tag_stem(audit_set: str, tau: float) -> str:
    """The common prefix of one attached card's tags (no trailing dot)."""
    return f"{CARD_TAG_PREFIX}{audit_set}.tau_{tau:g}"


DEFAULT_AUDIT = "calibration"
DEFAULT_METRIC = accuracy_key(DEFAULT_AUDIT)
