"""The two parties started as two OS processes (`python -m paperline.methods.pubsub_vfl.launch
--role active|passive`, as on two machines, here on 127.0.0.1) train the same model as the stage's
in-process coordinator: the same AUC for synchronous VFL (deterministic), within 0.02 for
PubSub-VFL (its asynchrony orders the updates differently run to run); ids that do not align
between the parties are refused on both sides."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from paperline.config import load_method_config, read_params
from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
from paperline.methods.pubsub_vfl.data import VFLDataError, load
from paperline.methods.pubsub_vfl.train import join, run_variant

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("variant, tolerance", [("vfl", 1e-9), ("pubsub_vfl", 0.02)])
def test_two_launched_parties_match_the_in_stage_run(variant, tolerance):
    overrides = [f"channels.control_port={_free_port()}"]
    cmd = [sys.executable, "-m", "paperline.methods.pubsub_vfl.launch", "--profile", "tiny", "--variant", variant,
           "--params", str(ROOT / "params"), "--timeout", "60"] + [a for o in overrides for a in ("--set", o)]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    passive = subprocess.Popen(cmd + ["--role", "passive"], stdout=subprocess.PIPE, env=env, cwd=ROOT)
    active = subprocess.run(cmd + ["--role", "active"], stdout=subprocess.PIPE, env=env, cwd=ROOT, timeout=90)
    assert active.returncode == 0 and passive.wait(30) == 0
    launched = json.loads(active.stdout.decode().splitlines()[-1])
    told = json.loads(passive.stdout.read().decode().splitlines()[-1])
    assert told["metric"] == launched["metric"]  # the passive side hears the active side's figure
    assert launched["dropped"] == 0 and launched["dead_workers"] == {"active": [], "passive": []}

    _, cfg = load_method_config(PubSubVFLConfig, read_params(ROOT / "params"), "pubsub_vfl", "tiny", root=ROOT)
    in_stage = run_variant(cfg, load(cfg.data), variant, cfg.run_seeds()[0])
    assert (launched["workers_active"], launched["batch_size"]) == (in_stage.workers_active, in_stage.batch_size)
    assert launched["metric"] == pytest.approx(in_stage.metric, abs=tolerance)


def test_a_remote_party_whose_ids_do_not_align_is_refused_on_both_sides():
    cfg = PubSubVFLConfig(data={"name": "breast_cancer"}, epochs=1, channels={"control_port": _free_port()})
    data = load(cfg.data)
    theirs = load(cfg.data)
    theirs.passive_train.ids = np.roll(theirs.passive_train.ids, 1)
    errors = []

    def passive():
        try:
            join(cfg, theirs, "vfl", 0, timeout_s=30)
        except VFLDataError as err:
            errors.append(str(err))

    thread = threading.Thread(target=passive)
    thread.start()
    with pytest.raises(VFLDataError, match=r"train split \(remote party\): ids do not align.*different order"):
        run_variant(cfg, data, "vfl", 0, remote_passive=True, timeout_s=30)
    thread.join(30)
    assert len(errors) == 1 and "refused this party: train split" in errors[0]
