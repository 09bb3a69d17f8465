"""The claims of Shen, Cheng et al., *LLM at Network Edge: A Layer-wise Efficient Federated
Fine-tuning Approach* (LEFF), in our words, evaluated on this run's per-seed rows at the headline
(first) Dirichlet α:

- LEFF fine-tunes: its global test loss is below the pretrained model's before any round (the
  trivial baseline: doing nothing, the zero-started head's uniform guess);
- LEFF adapts the body: its test accuracy is above the frozen pretrained model's with the head
  trained alone (`fedhead`, a federated linear probe);
- LEFF comes close to full fine-tuning (FedAvg, the accuracy ceiling the paper compares with):
  declared as "LEFF's loss not above FedAvg's", so an interval above zero says it is worse;
- LEFF beats the parameter-efficient baselines FedLoRA, SLoRA (the paper's second-best method) and
  FedBitFit on test loss;
- choosing the block by layer importance beats choosing it at random or round-robin;
- a LEFF client computes and communicates less than a FedAvg client (FLOPs per client and round,
  megabytes down + up per round);
- stragglers: a LEFF round takes less simulated time than a FedAvg round, each client at its own
  compute rate (`client_rates`), the round as long as its slowest client's FLOPs / rate (LEFF's
  lower-capacity clients train fewer layers; FedAvg's train the whole model).

Every variant is scored the same way: the global model's classification loss (nats) and accuracy
on the same test windows of the play-attribution task (the pretrained row is the global model of
round 0). A seed changes the client shards,
batch order, block draws, distillation batches and LoRA's initial A.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paperline.claims import Claim, ClaimSpec

LEFF = "leff_importance"
PRETRAINED = "pretrained"  # the row of the global model before any federated round

SPECS: tuple[ClaimSpec, ...] = (
    ClaimSpec(name="leff_below_pretrained", claim="LEFF lowers the pretrained model's test loss",
              metric="test_loss", method=LEFF, versus=PRETRAINED, direction="lower", trivial=True),
    ClaimSpec(name="leff_above_fedhead", claim="LEFF's accuracy beats the frozen model with a trained head",
              metric="test_accuracy", method=LEFF, versus="fedhead", direction="higher"),
    ClaimSpec(name="leff_not_above_fedavg", claim="LEFF matches full fine-tuning (FedAvg) on test loss",
              metric="test_loss", method=LEFF, versus="fedavg", direction="lower"),
    *(ClaimSpec(name=f"leff_below_{b}", claim=f"LEFF reaches a lower test loss than {label}",
                metric="test_loss", method=LEFF, versus=b, direction="lower")
      for b, label in (("fedlora", "FedLoRA"), ("slora", "SLoRA"), ("fedbitfit", "FedBitFit"))),
    *(ClaimSpec(name=f"importance_below_{rule}", claim=f"importance-sampled blocks beat {label} blocks on test loss",
                metric="test_loss", method=LEFF, versus=f"leff_{rule}", direction="lower")
      for rule, label in (("random", "uniformly random"), ("round_robin", "round-robin"))),
    ClaimSpec(name="leff_client_flops_below_fedavg", claim="a LEFF client computes less than a FedAvg client",
              metric="client_gflops", method=LEFF, versus="fedavg", direction="lower"),
    ClaimSpec(name="leff_bytes_below_fedavg", claim="LEFF sends fewer bytes per round than FedAvg",
              metric="mb_per_round", method=LEFF, versus="fedavg", direction="lower"),
    ClaimSpec(name="leff_round_time_below_fedavg",
              claim="a LEFF round, clients at their compute rates, waits less for its straggler than a FedAvg round",
              metric="simulated_round_s", method=LEFF, versus="fedavg", direction="lower"),
)


def evaluate(seed_rows: Mapping[Any, Mapping[str, Mapping[str, Any]]]) -> list[Claim]:
    """Every claim whose two variants this run trained, from {seed: {variant: row}}."""
    ran = {variant for rows in seed_rows.values() for variant in rows}
    return [spec.evaluate(seed_rows) for spec in SPECS if spec.method in ran and spec.versus in ran]
