"""LEFF and its baselines on Flower: the `ClientApp` (every method's local step) and the server
`Strategy` (LEFF's importance, block choice, context distillation and layer-wise aggregation; the
baselines' plain weighted averaging of what they train), run by Flower's simulation engine (Ray)
with one ServerApp for every (α, method), so Ray starts once.

The same two apps run under Flower's Deployment Engine (`flower-superlink` + one
`flower-supernode --node-config "partition-id=<i> num-partitions=<n>"` per machine): a client reads
its shard of the corpus path the server sends, so each machine needs the corpus at that path.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from paperline.methods.leff.config import (
    LEFF_METHODS,
    LEFFConfig,
    client_capacity,
    client_rate,
    lr_rates,
    runs_planned,
    tunes_lr,
)
from paperline.methods.leff.data import FederatedData, Windows, federated_data
from paperline.methods.leff.leff import (
    HEAD,
    LAYER_KEY,
    add_classifier,
    add_lora,
    add_zero_biases,
    aggregate,
    build_model,
    choose_block,
    classify,
    head_state_keys,
    layer_importance,
    leff_client_model,
    lora_from_update,
    pack_sparse,
    sparse_masks,
    trainable_keys,
)
from paperline.nn.causal_lm import CausalLM, CausalLMConfig
from paperline.sweep import best_rate, loss_rank, sweep

# Offline and quiet, set before flwr is imported (the Makefile exports the same; a project-local
# FLWR_HOME is set by the task)
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import Strategy  # noqa: E402


def model_state(model: CausalLM) -> dict[str, torch.Tensor]:
    """The state to send: a tied lm_head is the embedding, sent once (loaded with strict=False)."""
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return {k: v.detach().clone() for k, v in state.items()}


def state_bytes(state: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


@torch.no_grad()
def evaluate(model: CausalLM, windows: Windows, batch_size: int = 64) -> tuple[float, float]:
    """Mean cross-entropy (nats) of the classification head and its accuracy on the labelled windows."""
    model.eval()
    loss, correct = 0.0, 0
    for i in range(0, len(windows), batch_size):
        x, y = windows.x[i:i + batch_size], windows.y[i:i + batch_size]
        logits = classify(model, x)
        loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += int((logits.argmax(-1) == y).sum())
    model.train()
    return loss / len(windows), correct / len(windows)


def client_shard(cfg: LEFFConfig, alpha: float, partition: int) -> Windows:
    return run_data(cfg, alpha, cfg.seed).clients[partition]


def run_data(cfg: LEFFConfig, alpha: float, seed: int) -> FederatedData:
    return federated_data(cfg.corpus, cfg.block_size, cfg.clients, alpha, seed, cfg.proxy_windows, cfg.eval_windows,
                          cfg.proxy_text, cfg.task_text, cfg.speeches_per_document, cfg.shard_fraction,
                          cfg.val_windows)


def local_batches(windows: int, batch_size: int, steps: int, epochs: int | None,
                  generator: torch.Generator) -> list[torch.Tensor]:
    """A round's batches of shard indices: `epochs` passes over the shard, each a fresh permutation
    cut into ⌈windows / batch_size⌉ batches (the last one shorter); without epochs, `steps` batches
    drawn with replacement."""
    if epochs is None:
        return [torch.randint(windows, (min(batch_size, windows),), generator=generator) for _ in range(steps)]
    return [batch for _ in range(epochs) for batch in torch.randperm(windows, generator=generator).split(batch_size)]


def local_train(model: CausalLM, keys: list[str], shard: Windows, batches: list[torch.Tensor], lr: float,
                head_lr: float | None = None, grad_masks: dict[str, torch.Tensor] | None = None) -> dict:
    """AdamW on the parameters named `keys` only (the head's at `head_lr`, the body's at `lr`), a
    step per batch of shard indices, on the classification loss; the FLOPs of the first step
    counted by torch's FlopCounterMode (forward + backward, every matmul incl. attention), per
    window, times the windows of every batch (the count is linear in the batch). `grad_masks`: a
    parameter named there trains its masked entries only (its gradient zero elsewhere, so AdamW,
    without weight decay, leaves those entries as they are: SLoRA's sparse stage)."""
    from torch.utils.flop_counter import FlopCounterMode

    names, grad_masks = set(keys), grad_masks or {}
    hooks = []
    for n, p in model.named_parameters():
        p.requires_grad_(n in names)
        if n in names and n in grad_masks:
            hooks.append(p.register_hook(lambda g, mask=grad_masks[n]: g * mask))
    head = [p for n, p in model.named_parameters() if n in names and n.startswith(f"{HEAD}.")]
    body = [p for n, p in model.named_parameters() if n in names and not n.startswith(f"{HEAD}.")]
    groups = [{"params": body, "lr": lr}] + ([{"params": head, "lr": head_lr if head_lr is not None else lr}]
                                             if head else [])
    opt = torch.optim.AdamW(groups, lr=lr, weight_decay=0.0)
    losses, flops = [], 0.0
    for step, idx in enumerate(batches):
        counter = FlopCounterMode(display=False) if step == 0 else None
        with counter if counter is not None else contextlib.nullcontext():
            loss = F.cross_entropy(classify(model, shard.x[idx]), shard.y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
        if counter is not None:
            flops = counter.get_total_flops() / len(idx) * sum(len(b) for b in batches)
        opt.step()
        losses.append(loss.item())
    for hook in hooks:
        hook.remove()
    trained = sum(int(grad_masks[n].sum()) if n in grad_masks else p.numel()
                  for n, p in model.named_parameters() if n in names)
    return {"train_loss": sum(losses) / len(losses), "flops": float(flops), "steps": float(len(batches)),
            "trained_params": float(trained),
            "held_params": float(sum(p.numel() for p in model.parameters()))}


def wait_for_round_peers(fault_dir: str, server_round: int, partition: int, peers: int, timeout: float) -> int:
    """The fault check's rendezvous: mark this client as started in the round, then wait (at most
    `timeout` s) until the round's `peers` other clients have started too; returns how many had.
    A killed Ray actor goes back into Flower's actor pool and the next message sent to the pool
    lands on it (ActorDiedError): a client that dies before a peer was sent to the pool takes that
    peer with it. Under load that happened or not with the timing, so the fault check kills its
    client only after every peer of the round holds a live actor (simulation: one machine, one
    folder; elsewhere the wait times out and the client dies anyway)."""
    folder = Path(fault_dir)
    (folder / f"round{server_round}-client{partition}").touch()
    deadline = time.monotonic() + timeout
    while (started := len(list(folder.glob(f"round{server_round}-client*"))) - 1) < peers:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return started


def global_layer_key(key: str, start: int, first: int) -> str:
    """A LEFF client's key in the global model: client-local layer j is global layer start + (j − first)
    (a client sends its block's layers and the classification head only)."""
    if key.startswith(f"{HEAD}."):
        return key
    match = LAYER_KEY.match(key)
    if match is None:
        raise ValueError(f"a LEFF client sent {key!r}, not a layer's or the head's key")
    return LAYER_KEY.sub(f"layers.{start + int(match.group(1)) - first}.", key)


# --- the client ----------------------------------------------------------------------------------

CLIENT = ClientApp()


def text_value(record: ConfigRecord, key: str) -> str:
    """A string the other side put in `record` (a record's values are typed as any record value)."""
    value = record[key]
    if not isinstance(value, str):
        raise TypeError(f"{key}: {value!r} is not a string")
    return value


def number_value(record: ConfigRecord | MetricRecord, key: str) -> int | float:
    """A number the other side put in `record`."""
    value = record[key]
    if not isinstance(value, (int, float)):
        raise TypeError(f"{key}: {value!r} is not a number")
    return value


def _partition(context: Context) -> int:
    return int(context.node_config["partition-id"])


@CLIENT.query()
def report(msg: Message, context: Context) -> Message:
    """Step 1 of a LEFF round: the client reports its capacity L_i and its data size D_i."""
    conf = msg.content.config_records["config"]
    cfg = LEFFConfig.model_validate_json(text_value(conf, "cfg"))
    partition = _partition(context)
    shard = client_shard(cfg, float(number_value(conf, "alpha")), partition)
    return Message(RecordDict({"metrics": MetricRecord({"partition": partition, "capacity": client_capacity(cfg, partition),
                                                        "num-examples": len(shard)})}), reply_to=msg)


@CLIENT.train()
def train(msg: Message, context: Context) -> Message:
    """Any method's local step: build the model the server describes, load what it sent, train
    the keys the method trains, send those back with the client's costs."""
    start = time.perf_counter()
    torch.set_num_threads(1)  # one core per ClientApp: Ray runs them side by side
    conf = msg.content.config_records["config"]
    cfg = LEFFConfig.model_validate_json(text_value(conf, "cfg"))
    method, server_round, partition = str(conf["method"]), int(number_value(conf, "server-round")), _partition(context)
    failing = cfg.faulty(method) and cfg.fail_client == partition and server_round == cfg.fail_round
    if conf["fault-dir"]:
        peers = int(number_value(conf, "round-clients")) - 1 if failing else 0
        wait_for_round_peers(str(conf["fault-dir"]), server_round, partition, peers, cfg.round_timeout_s / 2)
    if failing:
        if cfg.fail_mode == "kill":  # the ClientApp's process dies mid-round, as a crashed client would
            os._exit(1)
        raise RuntimeError(f"injected fault: client {partition} fails in round {server_round} (leff.fail_client)")
    model = add_classifier(CausalLM(CausalLMConfig.from_dict(json.loads(text_value(conf, "model-config")))),
                           int(number_value(conf, "classes")))
    sparse_stage = method == "slora" and conf["slora-stage"] == "sparse"
    if method == "fedlora" or (method == "slora" and not sparse_stage):
        model = add_lora(model, cfg.lora_rank, cfg.lora_alpha)  # its A and B: the server's, loaded below
    elif method == "fedbitfit":
        model = add_zero_biases(model)
    model.load_state_dict(msg.content.array_records["arrays"].to_torch_state_dict(), strict=False)
    first = int(number_value(conf, "block-first"))
    block = range(first, first + int(number_value(conf, "block-size")))
    keys = trainable_keys(method, [n for n, _ in model.named_parameters()], block)
    masks = sparse_masks(model, cfg.slora_density, cfg.seed) if sparse_stage else {}
    if sparse_stage:  # SLoRA's first stage: the masked entries of LoRA's targets and the head
        keys = list(masks) + keys  # trainable_keys gave the head (the model has no adapters yet)
    buffers = head_state_keys(model)  # every method trains the head: its statistics go with it
    generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + server_round * 1009 + partition)
    shard = client_shard(cfg, float(number_value(conf, "alpha")), partition)
    batches = local_batches(len(shard), cfg.batch_size, cfg.local_steps, cfg.local_epochs, generator)
    metrics = local_train(model, keys, shard, batches, cfg.lr, cfg.head_lr, masks)
    state = model.state_dict()
    sent = {k: state[k].detach().clone() for k in keys + buffers if k not in masks} | pack_sparse(state, masks)
    metrics |= {"partition": partition, "num-examples": len(shard), "wall_s": time.perf_counter() - start,
                "bytes_up": float(state_bytes(sent))}
    return Message(RecordDict({"arrays": ArrayRecord(sent), "metrics": MetricRecord(metrics)}), reply_to=msg)


# --- the server ----------------------------------------------------------------------------------

@dataclass
class MethodRun:
    """What one (method, α, seed) run measured, round by round; `initial` is the global model before
    any round (the pretrained base: LoRA's B and BitFit's biases start at zero), scored the same way."""
    method: str
    alpha: float
    initial: dict
    rounds: list[dict] = field(default_factory=list)
    clients: int = 0  # nodes that answered the capacity query (a client killed earlier does not)
    seed: int = 0
    lr: float | None = None  # the body's lr it trained at (a record before the lr tuning: None)
    # the tuning run's score after its last round on the validation windows (None: not a tuning run)
    validation: dict | None = None
    # at the tuned (first) α and seed, the chosen run carries every grid point's validation score
    lr_sweep: list[dict] | None = None

    @property
    def final(self) -> dict:
        return self.rounds[-1] if self.rounds else self.initial

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "MethodRun":
        return cls(**d)


def validation_rank(point: dict) -> tuple[float, float, float]:
    """How a tuning run ranks by its validation score: the lowest validation loss (the table's
    primary metric; continuous, where 128 windows' accuracy ties rates: measured, FedAvg's 3e-4 and
    1e-3 at 0.281), a tie broken by the higher accuracy, then the smaller lr: the same rule for every
    method; a diverged run last (paperline/sweep.py: loss_rank)."""
    return loss_rank(point["val_loss"]), -point["val_accuracy"], point["lr"]


class FederatedFineTuning(Strategy):
    """One strategy for every method: LEFF (per-client blocks and distilled contexts, layer-wise
    aggregation) and the baselines (the whole global state out, the trained keys back, averaged by
    D_i). A client whose reply is an error (its ClientApp raised, or its process died: Ray's
    ActorDiedError) is dropped from the round and recorded; a dead node stays out of later runs."""

    def __init__(self, cfg: LEFFConfig, method: str, alpha: float, base: CausalLM, data: FederatedData, log=print,
                 validate: bool = False, initial: dict | None = None):
        """`cfg.seed` and `cfg.lr` are this run's seed and body lr (the clients read them from the config
        sent to them); `validate`: score the last round's model on the validation windows too;
        `initial`: the round-0 score on `data`'s test windows when known (every method's global model
        starts as the same function, the pretrained body with zero-started additions and head)."""
        self.cfg, self.method, self.alpha, self.log, self.validate = cfg, method, alpha, log, validate
        self.model = build_model(method, base, cfg.lora_rank, cfg.lora_alpha, cfg.seed, classes=len(data.classes))
        self.rule = method.removeprefix("leff_") if method in LEFF_METHODS else None
        self.data = data
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.nodes: dict[int, dict] = {}  # node id → partition, capacity, num-examples
        self.plans: dict[int, dict] = {}  # node id → this round's block (LEFF) and bytes sent
        self.server_s = 0.0
        # SLoRA: the first stage's fixed masks and the pretrained values of the weights they cover
        self.masks = sparse_masks(self.model, cfg.slora_density, cfg.seed) if method == "slora" else {}
        self.sparse_start = {k: v.detach().clone() for k, v in self.model.state_dict().items() if k in self.masks}
        # the fault check's rendezvous folder (wait_for_round_peers), in the faulty method's run only
        self.fault_dir = tempfile.mkdtemp(prefix="leff-fault-") if cfg.faulty(method) else ""
        if initial is None:
            loss, acc = evaluate(self.model, data.test)
            initial = {"round": 0, "test_loss": loss, "test_accuracy": acc}
        self.run = MethodRun(method, alpha, dict(initial), seed=cfg.seed, lr=cfg.lr)

    def sparse_stage(self, server_round: int) -> bool:
        """Whether `server_round` is in SLoRA's first, sparse stage."""
        return self.method == "slora" and server_round <= self.cfg.slora_sparse_rounds

    def _config(self, server_round: int, **extra) -> ConfigRecord:
        return ConfigRecord({"cfg": self.cfg.model_dump_json(), "method": self.method, "alpha": self.alpha,
                             "server-round": server_round, "model-config": self.model.config.to_json_string(),
                             "block-first": 0, "block-size": 0, "fault-dir": self.fault_dir,
                             "classes": len(self.data.classes), "round-clients": len(self.nodes),
                             "slora-stage": "sparse" if self.sparse_stage(server_round) else "lora", **extra})

    def query_clients(self, grid: Grid, timeout: float) -> None:
        """Step 1: every node's partition, capacity L_i and data size D_i."""
        messages = [Message(RecordDict({"config": self._config(0)}), dst_node_id=node, message_type=MessageType.QUERY)
                    for node in grid.get_node_ids()]
        for reply in grid.send_and_receive(messages, timeout=timeout):
            if reply.has_error():
                continue  # a client that cannot answer is never sampled
            m = reply.content.metric_records["metrics"]
            self.nodes[reply.metadata.src_node_id] = {"partition": int(number_value(m, "partition")),
                                                      "capacity": int(number_value(m, "capacity")),
                                                      "num-examples": int(number_value(m, "num-examples"))}
        self.run.clients = len(self.nodes)
        L = self.model.config.num_layers
        for node in self.nodes.values():
            if node["capacity"] > L:
                raise ValueError(f"params/leff.yaml: leff.capacities: client {node['partition']} reports capacity "
                                 f"{node['capacity']} but the model has {L} layers")

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):
        started = time.perf_counter()
        L = self.model.config.num_layers
        state = model_state(self.model)
        scores = None
        if self.rule == "importance":  # one forward + backward on the proxy set, on the server
            scores = layer_importance(self.model, self.data.proxy.x, self.data.proxy.y)
        contexts: dict[tuple[int, int], tuple] = {}  # a distilled context serves every client with that block
        messages, self.plans = [], {}
        for node, info in sorted(self.nodes.items(), key=lambda kv: kv[1]["partition"]):
            if self.rule is None:
                sent, extra, plan = state, {}, {}
            else:
                size = info["capacity"]
                start = choose_block(self.rule, scores, size, L, server_round, info["partition"], self.generator)
                if (start, size) not in contexts:
                    contexts[(start, size)] = leff_client_model(
                        self.model, start, size, self.data.proxy.x, self.cfg.compression, self.cfg.distill_steps,
                        self.cfg.distill_lr, self.cfg.attention_kl_weight, self.cfg.batch_size, self.generator)
                client_model, first, losses = contexts[(start, size)]
                sent = model_state(client_model)
                extra = {"block-first": first, "block-size": size,
                         "model-config": client_model.config.to_json_string()}
                plan = {"block_start": start, "block_first": first, "block_size": size,
                        "context_layers": client_model.config.num_layers - size,
                        "distill_final": sum(v[-1] for v in losses.values() if v)}
            self.plans[node] = plan | {"bytes_down": state_bytes(sent)}
            messages.append(Message(RecordDict({"arrays": ArrayRecord(sent), "config": self._config(server_round, **extra)}),
                                    dst_node_id=node, message_type=MessageType.TRAIN))
        self.server_s = time.perf_counter() - started
        self.scores = None if scores is None else scores.tolist()
        return messages

    def aggregate_train(self, server_round: int, replies):
        started = time.perf_counter()
        updates, clients, dropped = [], [], []
        # replies come in the order the clients finished: summing the updates in that order moved
        # the aggregate's last bits run to run, and through the next round's importance draw
        # (a sampled block) whole trajectories (issue 38). Partition order makes the sum repeatable.
        for reply in sorted(replies, key=lambda r: self.nodes[r.metadata.src_node_id]["partition"]):
            node = reply.metadata.src_node_id
            if reply.has_error():
                dropped.append({"partition": self.nodes[node]["partition"], "reason": reply.error.reason[:300]})
                continue
            sent = reply.content["arrays"].to_torch_state_dict()
            plan = self.plans[node]
            if self.rule is not None:
                sent = {global_layer_key(k, plan["block_start"], plan["block_first"]): v for k, v in sent.items()}
            m = reply.content["metrics"]
            updates.append((float(m["num-examples"]), sent))
            clients.append({"partition": int(m["partition"]), "capacity": self.nodes[node]["capacity"],
                            "num_examples": int(m["num-examples"]), "train_loss": float(m["train_loss"]),
                            "flops": float(m["flops"]), "steps": int(m["steps"]),
                            "trained_params": int(m["trained_params"]),
                            "held_params": int(m["held_params"]), "wall_s": float(m["wall_s"]),
                            "simulated_s": float(m["flops"]) / (client_rate(self.cfg, int(m["partition"])) * 1e9),
                            "bytes_up": int(m["bytes_up"])} | plan)
        if updates:
            masks = self.masks if self.sparse_stage(server_round) else {}  # SLoRA's clients sent these packed
            self.model.load_state_dict(aggregate(model_state(self.model), updates, masks), strict=False)
        svd_kept = None
        if self.method == "slora" and server_round == self.cfg.slora_sparse_rounds:  # the second stage's start
            self.model, svd_kept = lora_from_update(self.model, self.sparse_start, self.cfg.lora_rank,
                                                    self.cfg.lora_alpha, self.cfg.seed)
        loss, acc = evaluate(self.model, self.data.test)
        clients.sort(key=lambda c: c["partition"])
        record = {"round": server_round, "test_loss": loss, "test_accuracy": acc,
                  "straggler_s": max((c["wall_s"] for c in clients), default=math.nan),
                  # the round's time with each client at its compute rate: the slowest one's
                  "simulated_round_s": max((c["simulated_s"] for c in clients), default=math.nan),
                  "bytes_down": sum(p["bytes_down"] for p in self.plans.values()),
                  "bytes_up": sum(c["bytes_up"] for c in clients),
                  "server_s": self.server_s + time.perf_counter() - started,
                  "layer_importance": self.scores, "clients": clients, "dropped": dropped}
        if svd_kept is not None:  # SLoRA: the share of the sparse update's energy its rank-r start kept
            record["slora_svd_kept"] = svd_kept
        self.run.rounds.append(record)
        if self.validate and server_round == self.cfg.rounds:
            val_loss, val_acc = evaluate(self.model, self.data.val)
            self.run.validation = {"lr": self.cfg.lr, "val_loss": val_loss, "val_accuracy": val_acc}
            self.log(f"leff: {self.method} lr {self.cfg.lr:g}: validation loss {val_loss:.4f} acc {val_acc:.4f}")
        self.log(f"leff: {self.method} α={self.alpha:g} seed {self.cfg.seed} round {server_round}: test loss {loss:.4f} "
                 f"acc {acc:.4f}, straggler {record['straggler_s']:.2f} s, dropped {len(dropped)}")
        return None, MetricRecord({"test_loss": loss, "test_accuracy": acc})

    def configure_evaluate(self, server_round, arrays, config, grid):
        return []  # evaluation is on the server's global test windows (aggregate_train)

    def aggregate_evaluate(self, server_round, replies):
        return None

    def close(self) -> None:
        if self.fault_dir:
            shutil.rmtree(self.fault_dir, ignore_errors=True)

    def summary(self) -> None:
        self.log(f"leff: {self.method} α={self.alpha:g} seed {self.cfg.seed} on {len(self.nodes)} clients, "
                 f"{self.cfg.rounds} rounds")


def train_planned(cfg: LEFFConfig, results: dict[tuple[str, float, int], MethodRun], train_run, on_result=None,
                  log=print, tuned: dict[tuple[str, float], MethodRun] | None = None, on_tuned=None) -> None:
    """Every planned run not in `results` into it, `train_run(method, α, seed, lr, validate)` training
    one. The lr tuning (GeoAda's shape, paperline/sweep.py: sweep): at the first α and seed every
    method that trains the body runs once per point of the same grid, scored on the validation
    windows, and where the best (validation_rank) is an end of what was tried, once more one step
    past it, up to `lr_sweep_extend` times; the best is that seed's run and its lr every later run's
    (a resumed flow reads it back from the saved run). A tuning run in `tuned` ({(method, lr): run},
    the ones a killed flow finished) is not trained again; each new one goes to `on_tuned(run)`."""
    tuned_alpha, tuned_seed, rates = cfg.alphas[0], cfg.run_seeds()[0], lr_rates(cfg)
    tuned = tuned or {}
    chosen: dict[str, float] = {}
    for method, alpha, seed in runs_planned(cfg):
        if (method, alpha, seed) in results:
            kept = results[(method, alpha, seed)]
            if (alpha, seed) == (tuned_alpha, tuned_seed) and kept.lr is not None:
                chosen[method] = kept.lr
            continue
        if (alpha, seed) == (tuned_alpha, tuned_seed) and tunes_lr(method) and len(rates) > 1:
            def fit(lr: float, method: str = method, alpha: float = alpha, seed: int = seed) -> MethodRun:
                if (method, lr) in tuned:
                    return tuned[(method, lr)]
                run = train_run(method, alpha, seed, lr, True)
                if on_tuned is not None:
                    on_tuned(run)
                return run

            def rank(run: MethodRun) -> tuple[float, float, float]:
                assert run.validation is not None  # a tuning run is scored on the validation windows
                return validation_rank(run.validation)

            tried = sweep(rates, fit, rank, cfg.lr_sweep_extend)
            chosen[method] = best_rate(tried, rank)
            run = tried[chosen[method]]
            run.lr_sweep = [r.validation for r in tried.values() if r.validation is not None]
            log(f"leff: {method}: lr {chosen[method]:g} chosen of {sorted(tried)} on the validation windows")
        else:
            # fedhead's body is frozen: the body lr is moot, `lr` recorded
            run = train_run(method, alpha, seed, chosen.get(method, rates[0]) if tunes_lr(method) else cfg.lr, False)
        results[(method, alpha, seed)] = run
        if on_result is not None:
            on_result(run)


def run_federated(cfg: LEFFConfig, base: CausalLM, done: dict[tuple[str, float, int], MethodRun] | None = None,
                  on_result=None, log=print, tuned: dict[tuple[str, float], MethodRun] | None = None,
                  on_tuned=None) -> dict[tuple[str, float, int], MethodRun]:
    """Every planned (method, α, seed) (config.runs_planned) not in `done`, one after another in one Flower
    simulation (Ray backend, `cfg.clients` virtual SuperNodes); `on_result(run)` after each and
    `on_tuned(run)` after each lr-tuning run (the task saves both, so a killed run resumes at the
    next; `tuned`: the tuning runs it finished, train_planned's)."""
    from flwr.simulation import run_simulation

    L = base.config.num_layers
    if max(cfg.capacities) > L:
        raise ValueError(f"params/leff.yaml: leff.capacities: {max(cfg.capacities)} exceeds the model's {L} layers "
                         f"({cfg.model})")
    results = dict(done or {})
    errors: list[BaseException] = []
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            data: dict[tuple[float, int], FederatedData] = {}
            initial: dict[tuple[float, int], dict] = {}  # the round-0 score on each data's test windows

            def train_run(method: str, alpha: float, seed: int, lr: float, validate: bool) -> MethodRun:
                run_cfg = cfg.model_copy(update={"seed": seed, "lr": lr})  # the clients read both from it
                if (alpha, seed) not in data:
                    data[(alpha, seed)] = run_data(cfg, alpha, seed)
                strategy = FederatedFineTuning(run_cfg, method, alpha, base, data[(alpha, seed)], log, validate,
                                               initial.get((alpha, seed)))
                initial[(alpha, seed)] = strategy.run.initial
                try:
                    strategy.query_clients(grid, cfg.round_timeout_s)
                    strategy.start(grid=grid, initial_arrays=ArrayRecord(), num_rounds=cfg.rounds,
                                   timeout=cfg.round_timeout_s)
                finally:
                    strategy.close()
                return strategy.run

            train_planned(cfg, results, train_run, on_result, log, tuned, on_tuned)
        except BaseException as err:  # the simulation logs and swallows it: re-raised below
            errors.append(err)
            raise

    # Flower's Ray backend hands the workers this process's sys.path: they import the same paperline
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the server's importance, distillation and evaluation: small matmuls, shared cores
    try:
        run_simulation(server_app=server, client_app=CLIENT, num_supernodes=cfg.clients,
                       backend_config={"client_resources": {"num_cpus": cfg.client_cpus, "num_gpus": 0.0},
                                       "init_args": {"include_dashboard": False, "log_to_driver": False}})
    finally:
        torch.set_num_threads(threads)
    if errors:
        raise errors[0]
    missing = [run for run in runs_planned(cfg) if run not in results]
    if missing:
        raise RuntimeError(f"the Flower simulation ended without results for {missing} (see its log above)")
    return results
