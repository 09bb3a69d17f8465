"""Parameters of the PubSub-VFL run: data, the channels, the parties' workers, the planner and DP."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from paperline.config import MethodConfig, ProjectPath

PositiveInt = Annotated[int, Field(ge=1)]
Variant = Literal["vfl", "vfl_ps", "avfl", "avfl_ps", "pubsub_vfl"]


class DataConfig(MethodConfig):
    # synthetic: make_classification (AUC); breast_cancer (AUC); diabetes (RMSE); file: a CSV or
    # Parquet table (the paper profile's Bank, Credit, Energy, Blog) whose columns are split by name
    name: Literal["synthetic", "breast_cancer", "diabetes", "file"] = "synthetic"
    n_samples: PositiveInt = 5000  # synthetic only
    n_features: Annotated[int, Field(ge=2)] = 40  # synthetic only
    passive_fraction: float = Field(0.6, gt=0, lt=1)  # share of the columns at the passive party
    path: ProjectPath | None = None  # file only
    # file only: the paper's tables as their sources ship them (data.py LAYOUTS: Bank's
    # bank-full.csv, Credit's default-of-credit-card-clients CSV, Energy's energydata_complete.csv,
    # Blog's blogData_train.csv), their label, id and task set by the layout; "table": as configured
    layout: Literal["table", "bank", "credit", "energy", "blog"] = "table"
    id_column: str | None = None  # file only: ids that must align between the parties
    label_column: str = "y"
    task: Literal["classification", "regression"] = "classification"
    active_columns: list[str] | None = None  # file only; None: the first (1 - passive_fraction)
    passive_columns: list[str] | None = None
    test_fraction: float = Field(0.3, gt=0, lt=1)  # the paper's 70/30 split


class ChannelConfig(MethodConfig):
    host: str = "127.0.0.1"  # the address each party binds and the other connects to
    # a party on a machine of its own (launch.py): its address, else `host`
    active_host: str | None = None
    passive_host: str | None = None
    # the coordinator's port at the active party, where the passive party's launcher and parameter
    # server connect (launch.py: must be set); 0: a free port, when one process starts both parties
    control_port: Annotated[int, Field(ge=0, le=65535)] = 0
    active_port: Annotated[int, Field(ge=0, le=65535)] = 0  # 0: a free port, picked at bind time
    passive_port: Annotated[int, Field(ge=0, le=65535)] = 0
    buffer_embeddings: PositiveInt = 5  # p
    buffer_gradients: PositiveInt = 5  # q
    deadline_s: float = Field(10.0, gt=0)  # T_ddl

    def party_host(self, party: str) -> str:
        return getattr(self, f"{party}_host") or self.host


class PubSubVFLConfig(MethodConfig):
    data: DataConfig = DataConfig()
    channels: ChannelConfig = ChannelConfig()
    variants: list[Variant] = Field(default=["vfl", "vfl_ps", "avfl", "avfl_ps", "pubsub_vfl"], min_length=1)
    baseline: Variant = "vfl"
    # `seeds` (MethodConfig's): every variant trains once per seed, seed-major; the planner's
    # profile, the DP sweep's other μ and the fault check run at the first seed only
    workers_active: PositiveInt = 2  # w_a for the PS variants (the planner picks them for pubsub_vfl)
    workers_passive: PositiveInt = 2  # w_p
    batch_size: PositiveInt = 64
    epochs: PositiveInt = 10
    lr: float = Field(0.05, gt=0)
    hidden: PositiveInt = 32  # the bottom models' hidden width
    bottom_layers: Annotated[int, Field(ge=2)] = 2  # linear layers of a bottom model (the paper's: 10)
    embedding: PositiveInt = 8
    top_hidden: PositiveInt = 16  # the top model: a 2-layer MLP (the paper's)
    delta_t0: PositiveInt = 5  # ΔT₀, in epochs (spec update g)
    # ΔT's effect: pubsub_vfl also runs at these ΔT₀ at the first seed, at the plan's (w_a, w_p, B)
    delta_t0_sweep: list[PositiveInt] = []
    target_metric: float = 0.9  # AUC to reach (or RMSE to get under): wall time to target
    # heterogeneity emulation, off by default (the parties' compute is their real forward and
    # backward passes on their cores): a worker also sleeps this long per sample and pass, times
    # the party's slowdown, standing in for a slower machine (spec e)
    delay_per_sample_ms: float = Field(0.0, ge=0)
    passive_slowdown: float = Field(2.0, ge=1)
    active_slowdown: float = Field(1.0, ge=1)
    dp_mu: list[float] = Field(default=[], description="μ of the μ-GDP sweep on pubsub_vfl; 0 means no noise")
    dp_clip: float = Field(1.0, gt=0)
    # the planner: a short warm-up profile, then exhaustive search over (w_a, w_p, B)
    plan: bool = True
    plan_workers: list[PositiveInt] = Field(default=[1, 2, 3], min_length=1)
    plan_batches: list[PositiveInt] = Field(default=[32, 64, 128], min_length=1)
    # [I] the cost model's coordination terms (the paper's are not given): per step and worker,
    # and per message (the channel's latency)
    worker_overhead_ms: float = Field(0.5, ge=0)
    message_overhead_ms: float = Field(1.0, ge=0)
    # C_a + C_p: the cores the parties' processes are pinned to, split in proportion to their
    # workers (cores.py); None: every core this process may use; more than that is refused
    total_cores: PositiveInt | None = None
    memory_cap_mb: float = Field(1024.0, gt=0)  # per worker: gives B_max
    grid_check: bool = False  # also run the grid (at every seed) and compare the planner's pick with its optimum
    grid_epochs: PositiveInt | None = None  # epochs of each grid run (None: `epochs`): it times an epoch
    kill_worker: bool = False  # kill one passive worker mid-run of pubsub_vfl (the fault check)
