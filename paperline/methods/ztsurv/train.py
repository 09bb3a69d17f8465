"""Cross-validated survival training: every method gets the same folds; risks are collected out of
fold and Harrell's c-index is computed by scikit-survival (spec §b5, pitfall: out-of-fold)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

# at import, not in c_index: the flow's tasks score folds in parallel threads, and two threads
# importing sksurv for the first time at once fail on its circular package import
from sksurv.metrics import concordance_index_censored

from paperline.methods.ztsurv.config import ZTSurvConfig
from paperline.methods.ztsurv.models import GraphBatch, build_model
from paperline.nn.cox import cox_partial_likelihood_loss


def c_index(event: np.ndarray, time: np.ndarray, risk: np.ndarray) -> float:
    """Harrell's concordance index (sksurv.metrics.concordance_index_censored)."""
    return float(concordance_index_censored(np.asarray(event, bool), np.asarray(time, float),
                                            np.asarray(risk, float))[0])


def make_folds(event: np.ndarray, folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified by event, so every fold has events (Cox needs them)."""
    from sklearn.model_selection import StratifiedKFold

    skf = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    return [(tr, te) for tr, te in skf.split(np.zeros(len(event)), np.asarray(event, int))]


@dataclass
class FoldResult:
    fold: int
    test_index: np.ndarray
    test_risk: np.ndarray
    c_index: float
    loss_history: list[float] = field(default_factory=list)
    state_dict: dict | None = None


def train_neural_fold(method: str, graphs: list, train_idx: np.ndarray, test_idx: np.ndarray,
                      cfg: ZTSurvConfig, fold: int, device=None, progress: bool = False) -> FoldResult:
    """Full-batch training on the fold's training slides (the whole fold is one Cox risk set),
    a fixed number of epochs (no early stopping: no slide outside the training fold is looked at)."""
    from tqdm import tqdm

    device = device or torch.device("cpu")
    torch.manual_seed(cfg.seed * 1000 + fold)
    train = GraphBatch.from_graphs([graphs[i] for i in train_idx])
    test = GraphBatch.from_graphs([graphs[i] for i in test_idx])
    mean, std = train.x.mean(0), train.x.std(0).clamp_min(1e-6)
    train, test = train.normalised(mean, std).to(device), test.normalised(mean, std).to(device)
    model = build_model(method, train.x.shape[1], cfg, train.metadata).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    history = []
    for _ in tqdm(range(cfg.epochs), desc=f"{method} fold {fold}", disable=not progress, leave=False):
        model.train()
        opt.zero_grad()
        loss = cox_partial_likelihood_loss(model(train), train.time, train.event)
        loss.backward()
        opt.step()
        history.append(loss.detach().item())
    model.eval()
    with torch.no_grad():
        risk = model(test).cpu().numpy().astype(float)
    return FoldResult(fold, test_idx, risk, c_index(test.event.cpu().numpy(), test.time.cpu().numpy(), risk),
                      history, {k: v.cpu() for k, v in model.state_dict().items()})


def composition_cox_fold(compositions: np.ndarray, time: np.ndarray, event: np.ndarray,
                         train_idx: np.ndarray, test_idx: np.ndarray, fold: int) -> FoldResult:
    """Baseline: a Cox model (sksurv, small ridge) on slide-level tumour/stroma/lymphocyte area
    fractions. The fractions sum to one, so the ridge keeps the fit identifiable."""
    from sksurv.linear_model import CoxPHSurvivalAnalysis
    from sksurv.util import Surv

    X = compositions
    mu, sd = X[train_idx].mean(0), X[train_idx].std(0) + 1e-9
    y = Surv.from_arrays(event[train_idx].astype(bool), time[train_idx])
    cox = CoxPHSurvivalAnalysis(alpha=0.1).fit((X[train_idx] - mu) / sd, y)
    risk = np.asarray(cox.predict((X[test_idx] - mu) / sd), float)
    return FoldResult(fold, test_idx, risk, c_index(event[test_idx], time[test_idx], risk))


def random_risk_fold(time: np.ndarray, event: np.ndarray, test_idx: np.ndarray, fold: int, seed: int) -> FoldResult:
    """The trivial baseline: a risk drawn at random for each test slide (seeded by seed and fold),
    scored like every model's (c-index 0.5 in expectation)."""
    risk = np.random.default_rng([seed, fold]).standard_normal(len(test_idx))
    return FoldResult(fold, test_idx, risk, c_index(event[test_idx], time[test_idx], risk))


def out_of_fold(results: list[FoldResult], n: int) -> np.ndarray:
    risk = np.full(n, np.nan)
    for r in results:
        risk[r.test_index] = r.test_risk
    return risk
