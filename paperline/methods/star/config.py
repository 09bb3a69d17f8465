"""Parameters of the STAR experiment: the tasks (a continuous gymnasium task with SAC, the grid world
with DQN), their feedback budgets and schedules, STAR's regularisers (spec (b), (g)); the backbones',
the reward model's, SURF's and the scripted teacher's settings are those of `paperline.rl`."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from paperline.config import MethodConfig, StrictModel
from paperline.methods.star.mrn import MRNSettings
from paperline.methods.star.preference_transformer import PTSettings
from paperline.rl.dqn import DQNSettings
from paperline.rl.reward_model import RewardSettings, SURFSettings
from paperline.rl.sac import SACSettings
from paperline.rl.teacher import TeacherSettings

PositiveInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]

# what each variant turns on: learned reward (all but the oracle), SURF's semi-supervision and
# cropping, MRN's bi-level reward update through the critic, STAR's preference margin (PMR) and
# policy regularisation (PR)
VARIANTS: dict[str, dict[str, bool]] = {
    "oracle": {"learned": False, "surf": False, "pmr": False, "pr": False, "mrn": False},  # on the true reward
    "pebble": {"learned": True, "surf": False, "pmr": False, "pr": False, "mrn": False},
    "surf": {"learned": True, "surf": True, "pmr": False, "pr": False, "mrn": False},
    "mrn": {"learned": True, "surf": False, "pmr": False, "pr": False, "mrn": True},  # continuous tasks only
    "star": {"learned": True, "surf": False, "pmr": True, "pr": True, "mrn": False},
    "star_no_pmr": {"learned": True, "surf": False, "pmr": False, "pr": True, "mrn": False},
    "star_no_pr": {"learned": True, "surf": False, "pmr": True, "pr": False, "mrn": False},
}
Variant = Literal["oracle", "pebble", "surf", "mrn", "star", "star_no_pmr", "star_no_pr"]


class TaskConfig(StrictModel):
    name: Annotated[str, Field(pattern=r"^[a-z0-9_]+$")]
    env_id: str
    kind: Literal["continuous", "discrete"]  # continuous: SAC (+ Q_ξ); discrete: DQN (+ graph Q̂)
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    episode_steps: PositiveInt  # the time limit of a training and an evaluation episode
    steps: PositiveInt  # environment steps of a run (the buffer holds them all)
    seed_steps: NonNegInt = 1000  # uniform random actions first; updates start after them
    # PEBBLE's state-entropy pre-training: this many steps after the seed steps (continuous; PEBBLE's
    # `num_unsup_steps`, a duration: the first labels come at seed_steps + unsup_steps)
    unsup_steps: NonNegInt = 0
    budgets: list[PositiveInt] = Field(min_length=1)  # total labels of the preference variants
    segment: PositiveInt = 50  # steps per queried segment
    feedback_every: PositiveInt = 5000  # steps between feedback sessions
    queries_per_session: PositiveInt = 10
    candidates_factor: PositiveInt = 10  # uncertainty sampling: the top of factor × queries uniform pairs
    updates_per_step: PositiveInt = 1
    eval_every: PositiveInt = 5000
    eval_episodes: PositiveInt = 5
    held_out_pairs: PositiveInt = 200  # the reward model's preference accuracy, on noiseless labels
    # the variants this task runs (a subset of the experiment's `variants`, the oracle included);
    # None: all of them
    variants: list[Variant] | None = None

    @property
    def feedback_start(self) -> int:
        """The step of the first feedback session: after the seed steps and, on continuous tasks, the
        unsupervised phase."""
        return self.seed_steps + (self.unsup_steps if self.kind == "continuous" else 0)

    def feedback_sessions(self) -> int:
        """Feedback sessions the schedule holds: every `feedback_every` steps from `feedback_start`,
        before the last step (a session at the last step would train nothing; PEBBLE's loop ends first)."""
        return -(-(self.steps - self.feedback_start) // self.feedback_every)

    @model_validator(mode="after")
    def _schedule(self):
        start = self.feedback_start
        if start >= self.steps:
            raise ValueError(f"task {self.name}: feedback would start at step {start} ≥ steps {self.steps}")
        most = self.feedback_sessions() * self.queries_per_session
        if max(self.budgets) > most:
            raise ValueError(f"task {self.name}: a budget of {max(self.budgets)} labels cannot be spent: "
                             f"{self.feedback_sessions()} sessions of {self.queries_per_session} queries "
                             f"(from step {start}, every {self.feedback_every}, before step {self.steps}) ask {most}")
        if self.segment > self.episode_steps:
            raise ValueError(f"task {self.name}: segment {self.segment} exceeds episode_steps {self.episode_steps}")
        return self


class STARConfig(StrictModel):
    pmr_eps: float = Field(0.05, gt=0, lt=0.5)  # PMR's ε
    eta: float = Field(0.1, ge=0)  # PR's weight (spec (g): 0.1)
    beta: float = Field(6.0, gt=0)  # T_β's temperature (continuous)
    graph_batch: PositiveInt = 32  # states per KL term (discrete)
    graph_tol: float = Field(1e-4, gt=0)  # in-sample value iteration's stopping change


OfflineVariant = Literal["star", "iql", "awr", "mr", "pt"]


class OfflineConfig(StrictModel):
    """The offline variant (spec (b)): a reward model fitted once on preference labels over a fixed
    dataset, then STAR's in-sample Q_ξ/V_ξ with advantage-weighted policy extraction, against the
    same reward model with IQL's expectile value and with plain AWR (Monte-Carlo advantages), and
    the paper's MR baseline (`mr`: IQL on a plain Bradley–Terry reward model, no margin) and its
    Preference Transformer baseline (`pt`: IQL on the per-step rewards of a Preference Transformer
    fitted on the same labels, `pt` its settings).

    The data: `dataset` (a D4RL-style or Minari HDF5 file) with `labels` (a folder of Preference
    Transformer's label files) when given; else generated in the run, per seed, by rolling out
    policies of three qualities on `task` (a continuous task with an oracle row): uniform random,
    the oracle's true-reward SAC with Gaussian action noise (`noise` × the half action range), and
    that SAC itself, `episodes_per_policy` each; `pairs` segment pairs labelled by the scripted
    teacher. Either way the files are read through the loaders of `paperline.rl.offline`. Scores
    are normalised by the oracle's and a random policy's true return measured in the same run."""

    task: str  # the name of a continuous task in `tasks` (its oracle: expert behaviour and normaliser)
    dataset: str | None = None
    labels: str | None = None
    variants: list[OfflineVariant] = Field(default_factory=lambda: list[OfflineVariant](["star", "iql", "awr"]),
                                           min_length=1)
    episodes_per_policy: PositiveInt = 5
    noise: float = Field(0.5, ge=0)
    pairs: PositiveInt = 100
    segment: PositiveInt = 50
    held_out_pairs: PositiveInt = 200
    reward_updates: PositiveInt = 300  # the reward model's gradient steps (fitted once)
    steps: PositiveInt = 2000  # value and policy gradient steps per variant
    batch: PositiveInt = 256
    hidden: PositiveInt = 64
    layers: PositiveInt = 2
    lr: float = Field(3e-4, gt=0)
    awr_beta: float = Field(3.0, gt=0)  # inverse temperature of the weights exp(β·A) (IQL's 3)
    weight_clip: float = Field(100.0, gt=0)
    expectile: float = Field(0.7, gt=0.5, lt=1)  # IQL's τ
    eval_episodes: PositiveInt = 5
    pt: PTSettings = PTSettings()

    @model_validator(mode="after")
    def _files_together(self):
        if (self.dataset is None) != (self.labels is None):
            raise ValueError("offline: give both `dataset` and `labels`, or neither (generated data)")
        return self


class StarConfig(MethodConfig):
    tasks: list[TaskConfig] = Field(min_length=1)
    variants: list[Variant] = Field(min_length=1)
    # `seeds` (MethodConfig's): every row (task, variant, budget) and the offline variant run once per seed
    # defaults: the paper's SAC (1024×2, AdamW, lr 5e-4, batch 1024, τ 0.005, temperature 0.1, γ 0.99,
    # target update every 2 steps) and reward model (3 × 256×3, lr 3e-4, batch 128, 200 updates)
    sac: SACSettings = SACSettings(hidden=1024, lr=5e-4, batch=1024)
    dqn: DQNSettings = DQNSettings()
    reward: RewardSettings = RewardSettings()
    star: STARConfig = STARConfig()
    surf: SURFSettings = SURFSettings()
    mrn: MRNSettings = MRNSettings()
    teacher: TeacherSettings = TeacherSettings()
    # the Monte-Carlo returns of the overestimation metric run evaluation episodes on past the time
    # limit until γ^k falls below this (their tail then weighs less than it)
    mc_tail: float = Field(0.01, gt=0, lt=1)
    checkpoint_every_episodes: PositiveInt = 5
    threads: PositiveInt = 1  # torch intra-op threads per run
    offline: OfflineConfig | None = None  # the offline variant; None: online only

    @model_validator(mode="after")
    def _oracle_and_names(self):
        if "oracle" not in self.variants:
            raise ValueError("variants must include 'oracle': it normalises every score")
        names = [t.name for t in self.tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"task names repeat: {names}")
        for t in self.tasks:
            if t.kind == "discrete" and "mrn" in (t.variants or self.variants):
                raise ValueError(f"task {t.name}: MRN's inner step is SAC's critic; a discrete task cannot run "
                                 f"'mrn' (give the task a `variants` list without it)")
            if t.variants is not None and ("oracle" not in t.variants or not set(t.variants) <= set(self.variants)):
                raise ValueError(f"task {t.name}: variants {t.variants} must include 'oracle' and be among "
                                 f"`variants` {self.variants}")
        if self.offline is not None:
            task = next((t for t in self.tasks if t.name == self.offline.task), None)
            if task is None or task.kind != "continuous":
                raise ValueError(f"offline.task {self.offline.task!r} is not a continuous task of `tasks` ({names})")
            if self.offline.dataset is None and self.offline.segment >= task.episode_steps:
                raise ValueError(f"offline.segment {self.offline.segment} must be below task {task.name}'s "
                                 f"episode_steps {task.episode_steps} (a generated episode's last step is a timeout)")
        return self


def variants_of(cfg: StarConfig, task: TaskConfig) -> list[str]:
    """The variants `task` runs, in the order of the experiment's `variants`."""
    return [v for v in cfg.variants if task.variants is None or v in task.variants]


def row_name(task: str, variant: str, budget: int | None) -> str:
    """A comparison row (and its MLflow child run): the oracle has no feedback budget."""
    return f"{task}-{variant}" if variant == "oracle" else f"{task}-{variant}-{budget}"


def runs_of(cfg: StarConfig) -> list[tuple[TaskConfig, str, int | None]]:
    """Every (task, variant, budget) row of the experiment, oracles first."""
    out: list[tuple[TaskConfig, str, int | None]] = []
    for task in cfg.tasks:
        for variant in variants_of(cfg, task):
            out += [(task, variant, None)] if variant == "oracle" else [(task, variant, b) for b in task.budgets]
    return out
