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

TAG_RECIPE_ID = PREFIX + "recipe_id"  # stable hash of the config without seed/audit/tracking
TAG_RECIPE_NAME = PREFIX + "recipe"  # the recipe config-group choice, for people
TAG_SEED = PREFIX + "seed"  # the rerun's seed, as a decimal string
TAG_MODEL = PREFIX + "model"
TAG_TASK = PREFIX + "task"
TAG_SWEEP_ID = PREFIX + "sweep_id"  # equal on the sweep parent and all its reruns
TAG_AUDIT_SETS = PREFIX + "audit_sets"  # comma-separated audit sets the rerun was scored on
TAG_PLANNED_SEEDS = PREFIX + "planned_seeds"  # on the sweep parent: JSON list of ints
TAG_ERROR = PREFIX + "error"  # on a FAILED rerun: the exception, one line
TAG_SWEEP_RUN_ID = PREFIX + "sweep_run_id"  # on a card run: the sweep parent it belongs to
TAG_PARENT = "mlflow.parentRunId"  # MLflow's own nesting tag

METRIC_TRAIN_LOSS = "train_loss"  # logged with step
METRIC_TRAIN_SECONDS = "train_seconds"


def accuracy_key(audit_set: str) -> str:
    """Metric key of the final accuracy of a rerun on one audit set."""
    return f"accuracy/{audit_set}"


def majority_rate_key(audit_set: str) -> str:
    """Metric key of the audit set's majority-class rate (accuracy of a constant predictor)."""
    return f"majority_rate/{audit_set}"


def constant_fraction_key(audit_set: str) -> str:
    """Metric key of the share of the rerun's predictions that equal its most common prediction."""
    return f"pred_mode_share/{audit_set}"


DEFAULT_AUDIT = "calibration"
DEFAULT_METRIC = accuracy_key(DEFAULT_AUDIT)
