"""Structured-config schemas: one frozen-shape dataclass per config group.

They are registered in Hydra's ConfigStore as the base of every YAML file of the group, so a
typo in a YAML file or an override fails at composition. ``OmegaConf.to_object`` turns the
composed config into these dataclasses at the Hydra boundary (``__main__``); nothing below
that line sees a ``DictConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING


@dataclass
class ModelConfig:
    name: str = MISSING  # short label, used in tags and run names
    # "bert" / "gpt_neox": a small model built from this config with a word-level tokenizer
    # built from the task; "pretrained": transformers Auto* classes on name_or_path
    kind: str = MISSING
    name_or_path: str | None = None  # hub id or local directory (kind=pretrained)
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    intermediate_size: int = 128
    dropout: float = 0.1
    max_length: int = 48
    # the model's attention projections: what a LoRA recipe adapts unless it names its own
    lora_target_modules: list[str] = field(default_factory=list)


@dataclass
class LoraConfig:
    enabled: bool = False
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    # empty: the model's own model.lora_target_modules, so one LoRA recipe fits every model
    target_modules: list[str] = field(default_factory=list)
    # modules trained in full next to the adapters; peft already trains a sequence
    # classifier's new head ("classifier" / "score")
    modules_to_save: list[str] = field(default_factory=list)


@dataclass
class RecipeConfig:
    name: str = MISSING
    optimizer: str = "adamw"  # adamw | adam | sgd
    lr: float = MISSING
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    schedule: str = "linear"  # constant | linear | cosine
    warmup_ratio: float = 0.0
    epochs: int = 3
    max_steps: int | None = None  # overrides epochs when set
    batch_size: int = 32
    grad_clip: float | None = None
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class TaskConfig:
    name: str = MISSING
    kind: str = MISSING  # sentiment | entailment | files
    data_seed: int = 0
    # keyword arguments of the task builder (see recipe_audit.train.tasks)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class AuditConfig:
    # audit sets each rerun is scored on; ["all"] = every audit set the task defines
    sets: list[str] = field(default_factory=lambda: ["all"])
    # task shift: also score every rerun on all audit sets of these other tasks (names of
    # conf/task/ files), logged as accuracy/<task>/<audit set>; their labels must match in number
    extra_tasks: list[str] = field(default_factory=list)
    # task options for those other tasks (e.g. {n_audit: 200}); the rest come from their files
    extra_task_options: dict[str, Any] = field(default_factory=dict)
    # the audit set the card is computed on by default (the calibration audit D_P)
    primary: str = "calibration"
    taus: list[float] = field(default_factory=lambda: [0.7])
    eps: float = 0.10
    delta: float = 0.10
    higher_is_better: bool = True
    eval_batch_size: int = 256
    # what the card does with unfinished reruns: "fail" counts them as failures, "refuse" refuses
    unfinished: str = "fail"


@dataclass
class TrackingConfig:
    # None: $MLFLOW_TRACKING_URI, else the SQLite store under ./mlruns
    uri: str | None = None
    experiment_name: str = "recipe_audit"
    log_model: bool = False
    # compute and log recipe cards when a multirun ends
    card_on_multirun_end: bool = True
    # continue an interrupted sweep: skip seeds that already have a finished rerun (launchers/README.md)
    resume: bool = False


@dataclass
class RunConfig:
    model: ModelConfig = MISSING
    task: TaskConfig = MISSING
    recipe: RecipeConfig = MISSING
    audit: AuditConfig = MISSING
    tracking: TrackingConfig = MISSING
    seed: int = 0
    progress: bool = True  # progress bar during training
    # torch threads per rerun (0: leave torch's default)
    threads: int = 0


def register_configs() -> None:
    """Store the schemas so YAML files can extend them (``defaults: [schema_model, _self_]``)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="schema", node=RunConfig)
    cs.store(group="model", name="schema_model", node=ModelConfig)
    cs.store(group="task", name="schema_task", node=TaskConfig)
    cs.store(group="recipe", name="schema_recipe", node=RecipeConfig)
    cs.store(group="audit", name="schema_audit", node=AuditConfig)
    cs.store(group="tracking", name="schema_tracking", node=TrackingConfig)
    from .sweeper import register_plugin

    register_plugin()  # hydra/sweeper=curtail
