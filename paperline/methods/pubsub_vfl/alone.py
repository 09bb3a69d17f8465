"""The trivial baseline of vertical federated learning: the active party alone, with its own
features and labels only. The same split model (the top model's passive half gets a zero
embedding), the same initial weights, lr, epochs and batches of the same seed as synchronous VFL's
one-worker run, trained in process by plain SGD; scored on the same test rows by the same metric."""
from __future__ import annotations

import numpy as np

from paperline.methods.pubsub_vfl import model
from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
from paperline.methods.pubsub_vfl.data import VFLData
from paperline.methods.pubsub_vfl.parties import batches
from paperline.methods.pubsub_vfl.train import _initial


def active_alone(cfg: PubSubVFLConfig, data: VFLData, seed: int, batch_size: int) -> float:
    """The test metric (AUC or RMSE) of the active party's model trained without the passive party."""
    init = _initial(cfg, data, seed)["active"]
    bottom, top = init["bottom"], init["top"]
    x, y = data.active_train.x, data.y_train
    for epoch in range(cfg.epochs):
        for rows in batches(len(x), batch_size, epoch, seed):
            z_a, cache = model.bottom_forward(bottom, x[rows])
            _, g_top, g_za, _ = model.top_loss_and_grads(top, z_a, np.zeros((len(rows), cfg.embedding)), y[rows],
                                                         data.task)
            bottom = model.sgd(bottom, model.bottom_backward(bottom, cache, g_za), cfg.lr)
            top = model.sgd(top, g_top, cfg.lr)
    z_a = model.bottom_forward(bottom, data.active_test.x)[0]
    return model.metric(data.task, data.y_test, model.top_forward(top, z_a, np.zeros((len(z_a), cfg.embedding))))
