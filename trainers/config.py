"""Typed configuration for a training run, validated once.

Layers, later wins: the built-in defaults below, the environment's preset (its row in
`environments/registry.py`), a YAML file (`--config`), then `--set key=value` overrides and the CLI flags. Unknown keys
are rejected; values are never rewritten after parsing. The resolved config is saved to
the run directory as `config.yaml` and is all that `--resume` needs.

This module imports only pydantic and yaml (the environment registry when a config is
built): the CLI loads it at start-up.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agents import engines
from trainers.algorithm_table import ALGORITHMS


class _Section(BaseModel):
    # allow_inf_nan=False: .inf or .nan in any float field is refused, not trained with
    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, use_attribute_docstrings=True, allow_inf_nan=False
    )


class ModelConfig(_Section):
    name: str = "smollm2-135m"
    """A preset (`tiny`, `smollm2-135m`), a local Hugging Face folder, or an HF id."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Compute dtype (the learner's autocast, the engines' weights); trained weights stay
    float32. float32 on a CPU; float16 is refused (it needs loss scaling)."""

    @model_validator(mode="after")
    def _trainable_dtype(self) -> ModelConfig:
        if self.dtype == "float16":
            raise ValueError(
                "float16 training needs loss scaling, which the learner does not do; "
                "use bfloat16 (or float32)"
            )
        return self


class EnvConfig(_Section):
    name: str = "sql"
    """Environment name: a built-in (`skyrl envs` lists them) or a plugin named in `environments`."""
    tasks: str | None = None
    """A JSONL task file to train on instead of the environment's bundled suite."""
    train_split: str = "train"
    """Split of the bundled suite (or of the task file, when its tasks carry `split`) to train on."""
    max_turns: int = Field(5, ge=1)
    """Model turns per episode before the environment truncates it."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Extra keyword arguments for the environment's constructor (named parameters of it)."""

    @model_validator(mode="after")
    def _finite_kwargs(self) -> EnvConfig:
        def walk(key: str, value: Any) -> None:
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"kwargs.{key} is {value}; use a finite number")
            if isinstance(value, dict | list):
                pairs = value.items() if isinstance(value, dict) else enumerate(value)
                for k, v in pairs:
                    walk(f"{key}.{k}", v)

        for k, v in self.kwargs.items():
            walk(k, v)
        return self


class RolloutConfig(_Section):
    engine: str = "hf"
    """Inference backend for rollouts: `hf` (transformers, runs anywhere) or `vllm`; any row
    of the engine table (`agents/engines.py`) that holds weights."""
    batch_size: int = Field(4, ge=1)
    """Tasks per sampling round (P); one round per step unless dynamic sampling asks for more."""
    group_size: int = Field(4, ge=1)
    """Episodes per task (G); advantages are normalised within a group."""
    max_new_tokens: int = Field(96, ge=1)
    """Token budget of one model turn."""
    max_total_tokens: int = Field(2048, ge=16)
    """Token budget of a whole episode (prompt + all turns); past it the episode stops."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature; the learner scales logits by the same value."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling mass (1.0 = off). The loss assumes the full distribution, so keep 1.0 for exact ratios."""
    env_workers: int = Field(4, ge=1)
    """Threads that step environments in parallel."""
    num_engines: int = Field(1, ge=1)
    """Engine replicas; requests are spread over them by load and each gets every update."""
    tensor_parallel_size: int = Field(1, ge=1)
    """GPUs per vllm engine (tensor parallel); 1 for hf."""

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, name: str) -> str:
        engines.row(name, weights=True)  # an unknown name: one sentence naming the engines
        return name

    @model_validator(mode="after")
    def _budgets(self) -> RolloutConfig:
        if self.max_new_tokens >= self.max_total_tokens:
            raise ValueError(
                f"max_new_tokens ({self.max_new_tokens}) must be below max_total_tokens "
                f"({self.max_total_tokens}), which also holds the prompt"
            )
        return self


AlgorithmName = Literal["grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "ppo", "gspo"]
LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


class AlgorithmConfig(_Section):
    """Advantage estimator, policy loss and update schedule (formulas in docs/algorithms.md).

    Choosing `name` also applies that algorithm's preset (`trainers/algorithm_table.py`) under
    anything the user sets, so `--set algorithm.name=dapo` alone gives DAPO's clip-higher.
    """

    name: AlgorithmName = "grpo"
    """`grpo`, `dr_grpo`, `dapo`, `rloo`, `reinforce_pp`, `ppo` (critic + GAE) or `gspo`."""
    normalize_std: bool = True
    """Divide group-centred rewards by the group's std (GRPO, DAPO, GSPO)."""
    clip_low: float = Field(0.2, gt=0, lt=1)
    """Lower ratio clip: the ratio is kept above 1 - clip_low."""
    clip_high: float = Field(0.2, gt=0)
    """Upper ratio clip: the ratio is kept below 1 + clip_high (DAPO's clip-higher: > clip_low)."""
    dual_clip: float | None = Field(None, gt=1)
    """Dual-clip bound c > 1 for negative advantages (null = off; not for gspo)."""
    loss_agg: LossAgg = "token-mean"
    """How per-token losses become one number: `token-mean`, `seq-mean-token-mean`, `seq-mean-token-sum-norm`."""
    loss_agg_constant: int | None = Field(None, ge=1)
    """Dr. GRPO's constant normaliser; null = rollout.max_new_tokens × env.max_turns."""
    kl_coef: float = Field(0.0, ge=0)
    """Weight of the KL to the reference (initial) model; 0 skips loading the reference."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """Per-token KL estimator (Schulman's k1, k2, k3); k1 only in the reward (kl_in_reward)."""
    kl_in_reward: bool = False
    """Subtract the KL from the token rewards (ppo, reinforce_pp) instead of adding it to the loss."""
    kl_target: float | None = Field(None, gt=0)
    """Adaptive KL: steer the coefficient towards this KL (null = fixed kl_coef)."""
    kl_horizon: int = Field(10_000, ge=1)
    """Adaptive KL's horizon in samples."""
    entropy_coef: float = Field(0.0, ge=0)
    """Entropy bonus: subtract entropy_coef × entropy from the loss."""
    tis_cap: float | None = Field(None, gt=0)
    """Truncated importance sampling: weight each token by min(p_learner / p_sampler, cap); null = off with the hf engine (it is the learner's own model), 2.0 with vllm (another implementation of it)."""
    train_batch_size: int | None = Field(None, ge=1)
    """Groups per update; null = rollout.batch_size. Dynamic sampling samples until it has this many."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal and sample more tasks to refill the batch."""
    max_sample_rounds: int = Field(3, ge=1)
    """Dynamic sampling's cap: at most this many rounds of rollout.batch_size tasks per step."""
    overlong_buffer: int = Field(0, ge=0)
    """DAPO soft overlong penalty over the last this-many tokens of the response budget (0 = off)."""
    overlong_penalty: float = Field(1.0, ge=0)
    """Largest overlong penalty, reached at the end of the response budget."""
    overlong_filter: bool = False
    """DAPO overlong filtering: a response cut off by max_new_tokens carries no loss."""
    ppo_epochs: int = Field(1, ge=1)
    """Optimisation passes over each step's rollouts."""
    mini_batch_size: int = Field(0, ge=0)
    """Sequences per optimizer step (0 = the whole step in one optimizer step)."""
    micro_batch_size: int = Field(4, ge=1)
    """Sequences per forward/backward; gradients accumulate over a mini-batch."""
    gamma: float = Field(1.0, ge=0, le=1)
    """PPO: discount of GAE."""
    lam: float = Field(0.95, ge=0, le=1)
    """PPO: GAE's lambda."""
    value_clip: float = Field(0.2, gt=0)
    """PPO: clip of the value update around the rollout-time value."""
    critic_lr: float = Field(1e-5, gt=0)
    """PPO: the critic's AdamW learning rate (its own optimizer; same betas and schedule)."""
    critic_grad_clip: float = Field(1.0, gt=0)
    """PPO: the critic's max gradient norm."""

    @model_validator(mode="after")
    def _consistent(self) -> AlgorithmConfig:
        entry = ALGORITHMS[self.name]
        if self.kl_in_reward and not entry.token_level:
            token_level = [n for n, e in ALGORITHMS.items() if e.token_level]
            raise ValueError(
                f"kl_in_reward applies to {' and '.join(token_level)} only; "
                f"for {self.name} the KL goes into the loss (set kl_in_reward=false)"
            )
        if self.dual_clip is not None and entry.loss == "gspo":
            raise ValueError("dual_clip is a per-token clip; gspo clips whole sequences (unset it)")
        if self.kl_target is not None and self.kl_coef == 0:
            raise ValueError("kl_target adapts kl_coef, which is 0; set an initial kl_coef > 0")
        if self.kl_estimator == "k1" and self.kl_coef > 0 and not self.kl_in_reward:
            raise ValueError(
                "kl_estimator=k1 in the loss has zero expected gradient (it is logp - ref_logp "
                "on the policy's own samples); use k3 or k2, or k1 with kl_in_reward"
            )
        return self


class OptimConfig(_Section):
    lr: float = Field(1e-5, gt=0)
    """AdamW learning rate."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW moment decay rates (beta1, beta2)."""
    grad_clip: float = Field(1.0, gt=0)
    """Max global gradient norm."""
    warmup_steps: int = Field(0, ge=0)
    """Linear learning-rate warm-up, in optimizer steps."""
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    """Learning rate after warm-up: constant, or decayed to min_lr_ratio × lr by the last step
    (the horizon is max_steps × this step's optimizer steps, an estimate under dynamic sampling)."""
    min_lr_ratio: float = Field(0.0, ge=0, le=1)
    """Floor of the linear and cosine schedules, as a fraction of lr."""


class TrainerConfig(_Section):
    schedule: Literal["sync", "async"] = "sync"
    """`sync`: generate, then train, then push weights. `async`: rollouts never wait for the
    learner (up to the `async` section's bounds) and new weights reach the engine mid-episode."""
    max_steps: int = Field(30, ge=1)
    """Training steps; a step samples (one or more rounds of) episodes, then updates the
    policy with ppo_epochs × mini-batches optimizer steps."""
    seed: int = 0
    """Seeds task order, sampling and initialisation; a run with the same seed repeats exactly."""
    checkpoint_every: int = Field(5, ge=1)
    """Steps between checkpoints (the last step is always saved)."""
    keep_checkpoints: int = Field(2, ge=1)
    """Most recent checkpoints to keep on disk."""
    threads: int = Field(0, ge=0)
    """torch threads per process (0 = `$SKYRL_THREADS` when set, else every core)."""
    max_failed_fraction: float = Field(0.25, ge=0, le=1)
    """Warn on the console when more than this fraction of a step's episodes fail (an
    environment that raises, a timeout). A step where every episode failed stops the run."""


class AsyncConfig(_Section):
    """The async schedule's bounds (`trainer.schedule=async`; trainers/async_loop.py)."""

    max_staleness: int = Field(2, ge=0)
    """k: a sample whose oldest token is more than k policy versions behind the learner that
    trains on it is dropped (or re-weighted, see `stale`). 0 reproduces the sync schedule."""
    stale: Literal["drop", "reweight"] = "drop"
    """Samples beyond max_staleness: `drop` them (no loss; their reward still counts in their
    group's baseline), or `reweight`: keep them, every sample's tokens weighted by the
    truncated importance ratio min(p_learner / p_sampled, algorithm.tis_cap)."""
    rollout_batches: int | None = Field(None, ge=1)
    """Batches sampled ahead of the learner at most (null = max_staleness + 1, which keeps
    every sample within the bound; more gives the engine more work and drops some)."""
    behaviour_cap: float | None = Field(2.0, gt=0)
    """Decoupled PPO's behaviour weight: a token that older weights sampled is weighted by
    min(p_learner / p_sampled, cap), p_learner being the learner's policy before the update
    (the PPO ratio's own reference); null trains stale tokens as if on-policy. Skipped when
    algorithm.tis_cap already weights every token so (docs/algorithms.md, off-policy)."""


class WarmupConfig(_Section):
    sft_steps: int = Field(0, ge=0)
    """Supervised steps on the train split's reference answers before RL starts (0 = none).
    For a model that almost never earns a reward, RL has nothing to compare; a short warm-up
    (a "cold start") gives it answers to improve on. Needs an environment that can write a
    task's reference answer (`demonstration`); scored on the eval split afterwards."""
    batch_size: int = Field(8, ge=1)
    """Tasks per warm-up step."""
    lr: float = Field(5e-5, gt=0)
    """Learning rate of the warm-up (its own AdamW; the RL optimizer starts fresh after it)."""
    pass_rate_samples: int = Field(0, ge=0)
    """Pass-rate-filtered train set (0 = off): after the warm-up, sample this many answers
    (G, at `rollout.temperature`) per train task with the warm-up checkpoint and train only
    on the tasks whose pass rate is strictly between 0 and 1, where a group has something
    to compare. The rates are cached per checkpoint content, task ids, G and seed (under the
    cache dir), so a resumed or repeated run does not sample again. At least 2."""

    @model_validator(mode="after")
    def _filter_needs_a_warm_up(self) -> WarmupConfig:
        if self.pass_rate_samples == 1:
            raise ValueError(
                "warmup.pass_rate_samples=1 gives every task a pass rate of 0 or 1, so it "
                "keeps none; use 0 (off) or at least 2"
            )
        if self.pass_rate_samples and not self.sft_steps:
            raise ValueError(
                "warmup.pass_rate_samples filters the train set with the warm-up checkpoint; "
                "set warmup.sft_steps too, or pass_rate_samples=0"
            )
        return self


class EvalConfig(_Section):
    split: str = "dev"
    """Split scored before and after training."""
    limit: int = Field(60, ge=0)
    """Tasks scored (0 = skip evaluation)."""
    before: bool = True
    """Score the initial model before training."""
    after: bool = True
    """Score the final model after training."""
    every: int = Field(0, ge=0)
    """Also score every N steps during training (0 = only before/after); the accuracy goes
    into that step's metrics.jsonl line as `eval/accuracy` and the report to eval/step-NNNNNN.json."""
    holdout: float = Field(0.0, ge=0, lt=1)
    """For a task file without `split`: hold out this fraction of its tasks (chosen by a
    stable hash of their ids) as the eval split and train on the rest. 0 = train and
    evaluate on the same tasks (said on the console)."""


class TrackingConfig(_Section):
    uri: str | None = None
    """MLflow tracking URI; default: SQLite store `.mlflow/mlflow.db` inside the runs dir."""
    experiment: str = "skyrl"
    """MLflow experiment name."""
    enabled: bool = True
    """Log to MLflow at all."""


class RayConfig(_Section):
    address: str | None = None
    """Join an existing cluster (`ray://...` or `host:port`); default: start a local one."""
    placement: Literal["colocated", "split"] = "colocated"
    """`colocated`: learner workers and engines share the devices (they take turns);
    `split`: the learner group reserves one device each on one node (a Ray placement
    group: a GPU, or a CPU where the cluster has none) and each engine another."""
    share_process: bool = True
    """Where the run can (sync schedule, one `torch` learner worker, one `hf` engine,
    `colocated`), the learner, engine, reference and critic live in one Ray worker process:
    they take turns anyway, and each further process costs its own start-up (imports,
    about 5 s of CPU) and its own Python and torch runtime in memory. False: one process
    each."""


class LoraConfig(_Section):
    """LoRA through `peft`: only the adapters train, checkpoints hold only them (and the
    base model's path), engines get the merged weights."""

    rank: int = Field(0, ge=0)
    """Adapter rank; 0 = off (full fine-tuning)."""
    alpha: int = Field(32, gt=0)
    """Scale numerator: the update is B A * alpha / rank."""
    target_modules: list[str] = Field(
        default_factory=lambda: (
            ["q_proj", "k_proj", "v_proj", "o_proj"] + ["gate_proj", "up_proj", "down_proj"]
        )
    )
    """Names of the linear layers that get adapters (those the model has)."""
    modules_to_save: list[str] = Field(default_factory=list)
    """Small layers trained whole and saved with the adapter (peft's `modules_to_save`),
    e.g. `norm` (every RMSNorm, whose scale LoRA cannot change)."""


class LearnerConfig(_Section):
    """How the policy trains: one process, or a group of Ray actors (docs/scaling.md)."""

    strategy: Literal["torch", "fsdp", "deepspeed"] = "torch"
    """`torch`: every worker holds the whole model, gradients all-reduced; `fsdp`: FSDP2
    (weights, gradients and optimizer state sharded); `deepspeed`: ZeRO (`zero_stage`)."""
    num_workers: int = Field(1, ge=1)
    """Learner processes: Ray actors in one torch.distributed group (gloo on CPU, NCCL on
    GPU); each step's micro-batches are split over them. 1 with `torch`: the one-process learner."""
    zero_stage: Literal[2, 3] = 2
    """DeepSpeed ZeRO stage: 2 shards gradients and optimizer state, 3 the weights too."""
    lora: LoraConfig = Field(default_factory=LoraConfig)

    @model_validator(mode="after")
    def _lora_one_process(self) -> LearnerConfig:
        if self.lora.rank and (self.strategy != "torch" or self.num_workers > 1):
            raise ValueError(
                "learner.lora.rank>0 trains in the one-process learner only "
                "(learner.strategy=torch, learner.num_workers=1)"
            )
        return self


class RunConfig(_Section):
    """Everything a training run needs; saved resolved to `runs/<id>/config.yaml`."""

    # `async` is a Python keyword: the field is `async_`, its key in YAML and --set is `async`
    model_config = ConfigDict(
        **_Section.model_config, serialize_by_alias=True, validate_by_name=True
    )

    @model_validator(mode="after")
    def _batch_fits(self) -> RunConfig:
        a = self.algorithm
        too_big = (a.train_batch_size or 0) > self.rollout.batch_size
        if too_big and not a.dynamic_sampling:
            raise ValueError(
                f"algorithm.train_batch_size ({a.train_batch_size}) exceeds rollout.batch_size "
                f"({self.rollout.batch_size}); only dynamic sampling samples extra rounds"
            )
        if self.trainer.schedule == "async":
            if a.dynamic_sampling:
                raise ValueError(
                    "trainer.schedule=async does not do dynamic sampling (it refills a step "
                    "with more rounds); set algorithm.dynamic_sampling=false or schedule=sync"
                )
            if self.async_.stale == "reweight" and a.tis_cap is None:
                raise ValueError(
                    "async.stale=reweight weights stale samples by a truncated importance "
                    "ratio; set its cap, e.g. --set algorithm.tis_cap=2"
                )
        if self.eval.holdout and not self.env.tasks:
            raise ValueError(
                "eval.holdout splits a task file without `split` (env.tasks); "
                f"the bundled suite of {self.env.name!r} has its own {self.eval.split} split"
            )
        return self

    model: ModelConfig = Field(default_factory=ModelConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    async_: AsyncConfig = Field(default_factory=AsyncConfig, alias="async")
    warmup: WarmupConfig = Field(default_factory=WarmupConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    environments: dict[str, str] = Field(default_factory=dict)
    """User environments: name -> `module:Class` or `file.py:Class` (relative to the config file)."""
    project_dir: str | None = None
    """Folder plugins and relative paths resolve against (the config file's folder)."""


class ConfigError(ValueError):
    """A configuration problem, worded as one sentence for the user."""


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = (
            deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        )
    return out


def parse_set(item: str) -> dict[str, Any]:
    """`a.b.c=value` -> {"a": {"b": {"c": value}}}; the value is parsed as YAML (so 3, 1e-5, true work)."""
    if "=" not in item:
        raise ConfigError(
            f"--set {item!r} must look like KEY=VALUE, e.g. --set rollout.group_size=8"
        )
    key, _, raw = item.partition("=")
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(
            f"--set {item!r} has an empty key; use dotted keys like algorithm.kl_coef"
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    node: dict[str, Any] = {}
    cur = node
    parts = key.split(".")
    for part in parts[:-1]:
        cur[part] = {}
        cur = cur[part]
    cur[parts[-1]] = value
    return node


def read_yaml(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ConfigError(
            f"config file {path} is not valid YAML ({e.__class__.__name__})"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections (model:, env:, ...)")
    return data


def _explain(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    if first["type"] == "extra_forbidden":
        parent = first["loc"][:-1]
        section: Any = RunConfig
        for p in parent:
            fields = {f.alias or n: f for n, f in section.model_fields.items()}
            section = fields[str(p)].annotation
        fields = getattr(section, "model_fields", {})
        known = ", ".join(f.alias or n for n, f in fields.items())
        return f"unknown config key {where!r}; accepted keys here: {known}"
    if first["type"] == "value_error":  # a cross-field check: its message is the sentence
        msg = first["msg"].removeprefix("Value error, ")
        return f"{where}: {msg}" if where else msg
    value = first.get("input")
    return f"bad value {value!r} for {where}: {first['msg'].lower()}"


def _section(merged: dict[str, Any], key: str) -> dict[str, Any]:
    value = merged.get(key)
    return value if isinstance(value, dict) else {}


def build_config(layers: list[dict[str, Any]], env_name: str | None = None) -> RunConfig:
    """Merge layers over defaults and the env preset, then validate once."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = deep_merge(merged, layer)
    from environments.registry import BUILTINS

    env = env_name or _section(merged, "env").get("name") or EnvConfig().name
    preset = dict(BUILTINS[env].preset) if env in BUILTINS else {}
    mine, theirs = _section(merged, "algorithm"), _section(preset, "algorithm")
    if mine.get("name", theirs.get("name")) != theirs.get("name"):
        # the preset's algorithm settings belong to its algorithm: naming another one
        # starts from that one's own table preset, not DAPO's clip-higher riding along
        preset = {k: v for k, v in preset.items() if k != "algorithm"}
    merged = deep_merge(deep_merge(preset, merged), {"env": {"name": env}})
    algorithm = _section(merged, "algorithm").get("name", AlgorithmConfig().name)
    if (
        isinstance(algorithm, str) and algorithm in ALGORITHMS
    ):  # an unknown name is reported by validation below
        table = dict(ALGORITHMS[algorithm].preset)
        if (
            _section(merged, "trainer").get("schedule") == "async"
            and "dynamic_sampling" not in mine
        ):
            # async cannot refill a step with more rounds: a preset's dynamic sampling
            # yields to the schedule the user chose (asking for both is refused below)
            table["dynamic_sampling"] = False
        merged = deep_merge({"algorithm": table}, merged)
    try:
        return RunConfig.model_validate(merged)
    except ValidationError as e:
        raise ConfigError(_explain(e)) from None


def save_config(cfg: RunConfig, path: Path) -> None:
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), encoding="utf-8")


# Keys renamed since a run directory could first be written: old name -> new name(s).
_RENAMED = {"clip_eps": ("clip_low", "clip_high"), "epochs": ("ppo_epochs",)}


def _upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A config.yaml written by an older skyrl, in today's keys (same meaning, new names)."""
    algorithm = data.get("algorithm")
    if isinstance(algorithm, dict):
        for old, new in _RENAMED.items():
            if old in algorithm:
                value = algorithm.pop(old)
                for key in new:
                    algorithm.setdefault(key, value)
    return data


def load_saved_config(path: Path) -> RunConfig:
    """A run's saved config (also from runs written before a key was renamed)."""
    try:
        return RunConfig.model_validate(_upgrade(read_yaml(path)))
    except ValidationError as e:
        raise ConfigError(f"{path}: {_explain(e)}") from None
