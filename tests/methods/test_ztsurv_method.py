"""ZTSurv library: zero-shot segmentation on a known synthetic tile, graph construction, the Cox
loss against a hand-computed value, the c-index against a brute-force Harrell count, our sparse
R-GCN / GCN layers against torch_geometric's, and one training fold."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paperline.methods.ztsurv.config import ZTSurvConfig
from paperline.methods.ztsurv.graph import EDGE_KEYS, VISUAL_FEATURES, cell_table, composition, hetero_graph
from paperline.methods.ztsurv.models import GraphBatch, RelationalConv, SparseGCNConv, build_model
from paperline.methods.ztsurv.pipeline import slide_graph
from paperline.methods.ztsurv.segment import LYMPHOCYTE, STROMA, TUMOUR, zero_shot_segment
from paperline.methods.ztsurv.train import c_index, make_folds, train_neural_fold
from paperline.nn.cox import cox_partial_likelihood_loss


def known_tile(rng, size: int = 48):
    """Left half purple with dark nuclei (tumour), right half pink (stroma), a TIL square."""
    rgb = np.empty((size, size, 3), np.float32)
    rgb[:, : size // 2] = (150, 90, 170)
    rgb[:, size // 2:] = (235, 160, 190)
    nuclei = rng.random((size, size // 2)) < 0.3
    rgb[:, : size // 2][nuclei] = (70, 40, 120)
    rgb += rng.normal(0, 4, rgb.shape)
    rgb = np.clip(rgb, 0, 255).astype(np.uint8)
    tissue = np.ones((size, size), bool)
    tissue[:, :2] = False  # a strip of background
    til = np.zeros((size, size), np.float32)
    til[8:20, 30:42] = 0.9
    truth = np.zeros((size, size), np.uint8)
    truth[:, : size // 2] = TUMOUR
    truth[:, size // 2:] = STROMA
    truth[8:20, 30:42] = LYMPHOCYTE
    truth[~tissue] = 0
    return rgb, tissue, til, truth


def test_zero_shot_segmentation_of_a_known_tile():
    rgb, tissue, til, truth = known_tile(np.random.default_rng(0))
    labels = zero_shot_segment(rgb, tissue, til, til_threshold=0.5)
    assert (labels[~tissue] == 0).all()
    assert (labels[truth == LYMPHOCYTE] == LYMPHOCYTE).all()  # TIL > 0.5
    rest = tissue & (truth != LYMPHOCYTE)
    assert (labels[rest] == truth[rest]).mean() > 0.9  # the hematoxylin-rich half is tumour


def _graph_from_labels(labels: np.ndarray, cell_px: int = 2):
    rgb = np.full(labels.shape + (3,), 200, np.uint8)
    table = cell_table(rgb, labels > 0, labels, cell_px, min_tissue_fraction=0.3, min_component_fraction=0.2)
    return table, hetero_graph(table, time=5.0, event=True)


def test_graph_nodes_are_cells_of_each_component_and_edges_are_typed():
    # 2 x 2 cells of 2 x 2 px: [T | S] / [L | half T, half L]
    labels = np.array([[1, 1, 2, 2],
                       [1, 1, 2, 2],
                       [3, 3, 1, 3],
                       [3, 3, 1, 3]], np.uint8)
    table, g = _graph_from_labels(labels)
    assert [g[t].num_nodes for t in ("tumour", "stroma", "lymphocyte")] == [2, 1, 2]
    assert g["tumour"].x.shape == (2, len(VISUAL_FEATURES))
    assert sorted(g.edge_types) == sorted(EDGE_KEYS)  # all 9 keys, empty or not
    count = {k: g[k].edge_index.shape[1] for k in g.edge_types}
    # every pair of the 5 nodes touches (all cells are 8-neighbours); no self-loops
    assert count[("tumour", "adjacent", "tumour")] == 2
    assert count[("lymphocyte", "adjacent", "lymphocyte")] == 2
    assert count[("tumour", "adjacent", "lymphocyte")] == count[("lymphocyte", "adjacent", "tumour")] == 4
    assert count[("stroma", "adjacent", "stroma")] == 0
    assert sum(count.values()) == 5 * 4
    assert float(g.time) == 5.0 and bool(g.event)
    assert composition(table) == pytest.approx([6 / 16, 4 / 16, 6 / 16])


def test_distant_cells_are_not_joined():
    labels = np.zeros((2, 8), np.uint8)
    labels[:, :2] = 1
    labels[:, 6:] = 3
    _, g = _graph_from_labels(labels)
    assert all(g[k].edge_index.shape[1] == 0 for k in g.edge_types)


def test_cox_loss_against_a_hand_computed_value_with_ties():
    risk = torch.tensor([0.1, 0.5, -0.2, 0.3], requires_grad=True)
    time = torch.tensor([1.0, 2.0, 2.0, 3.0])
    event = torch.tensor([1, 1, 1, 0])
    e = [math.exp(v) for v in (0.1, 0.5, -0.2, 0.3)]
    # Breslow: subjects 1 and 2 tie at t=2; both keep {1, 2, 3} as risk set
    hand = -((0.1 - math.log(sum(e))) + (0.5 - math.log(e[1] + e[2] + e[3]))
             + (-0.2 - math.log(e[1] + e[2] + e[3]))) / 3
    loss = cox_partial_likelihood_loss(risk, time, event)
    assert loss.item() == pytest.approx(hand, abs=1e-6)
    # by hand: -((0.1 - 1.59382) + (0.5 - 1.33954) + (-0.2 - 1.33954)) / 3
    assert loss.item() == pytest.approx(1.29097, abs=1e-4)
    loss.backward()
    assert torch.isfinite(risk.grad).all() and float(risk.grad.sum()) == pytest.approx(0.0, abs=1e-6)
    shuffled = torch.tensor([2, 0, 3, 1])
    assert cox_partial_likelihood_loss(risk[shuffled], time[shuffled], event[shuffled]).item() == pytest.approx(hand, abs=1e-6)


def test_cox_loss_without_events_is_zero_and_keeps_the_graph():
    risk = torch.randn(3, requires_grad=True)
    loss = cox_partial_likelihood_loss(risk, torch.ones(3), torch.zeros(3))
    loss.backward()
    assert loss.item() == 0.0 and risk.grad is not None


def harrell(event, time, risk) -> float:
    """Harrell's count: (i, j) is comparable when i dies first, or when they share a time and
    only i died (j, censored then, was still at risk); tied risks count a half."""
    concordant = ties = pairs = 0
    for i in range(len(time)):
        for j in range(len(time)):
            if event[i] and (time[i] < time[j] or (time[i] == time[j] and not event[j])):
                pairs += 1
                concordant += risk[i] > risk[j]
                ties += risk[i] == risk[j]
    return (concordant + 0.5 * ties) / pairs


def test_c_index_is_harrells_from_scikit_survival():
    rng = np.random.default_rng(0)
    time = rng.integers(1, 40, 60).astype(float)  # integer times: ties in time
    event = rng.random(60) < 0.6
    risk = np.round(rng.normal(size=60) - 0.03 * time, 1)  # rounded: ties in risk
    assert c_index(event, time, risk) == pytest.approx(harrell(event, time, risk), abs=1e-9)
    assert c_index(event, time, -time) > 0.9  # higher risk, earlier death: concordant


def _random_graphs(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    graphs = []
    for k in range(n):
        labels = rng.choice([0, 1, 2, 3], size=(12, 12), p=[0.1, 0.4, 0.35, 0.15]).astype(np.uint8)
        rgb = rng.integers(0, 255, (12, 12, 3)).astype(np.uint8)
        table = cell_table(rgb, labels > 0, labels, 3, 0.3, 0.2)
        graphs.append(hetero_graph(table, time=float(rng.integers(1, 100)), event=bool(rng.random() < 0.7)))
    return graphs


def test_relational_conv_equals_torch_geometric_rgcnconv():
    from torch_geometric.nn import GCNConv, RGCNConv

    torch.manual_seed(0)
    b = GraphBatch.from_graphs(_random_graphs(3))
    x = torch.randn(b.x.shape[0], 5)
    ours, theirs = RelationalConv(5, 4, 6), RGCNConv(5, 4, num_relations=6, aggr="mean")
    ours.load_state_dict(theirs.state_dict())
    assert torch.allclose(ours(x, b.adj_relations), theirs(x, b.edge_index, b.relation), atol=1e-5)
    ours, theirs = SparseGCNConv(5, 4), GCNConv(5, 4)
    theirs.bias.data.normal_()
    ours.load_state_dict(theirs.state_dict())
    assert torch.allclose(ours(x, b.adj_gcn), theirs(x, b.edge_index), atol=1e-5)


@pytest.mark.parametrize("method, gnn", [("ztsurv", "rgcn"), ("ztsurv", "hgt"), ("gcn", "rgcn"),
                                         ("abmil", "rgcn"), ("mean_pool", "rgcn")])
def test_every_model_gives_one_risk_per_slide_and_trains(method, gnn):
    torch.manual_seed(0)
    b = GraphBatch.from_graphs(_random_graphs(4))
    model = build_model(method, b.x.shape[1], ZTSurvConfig(hidden=8, gnn=gnn), b.metadata)
    risk = model(b)
    assert risk.shape == (4,) and torch.isfinite(risk).all()
    cox_partial_likelihood_loss(risk, b.time, b.event).backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_a_training_fold_lowers_the_cox_loss_and_scores_the_test_slides():
    graphs = _random_graphs(12, seed=1)
    event = np.array([bool(g.event) for g in graphs])
    (train, test), = [make_folds(event, 3, seed=0)[0]]
    result = train_neural_fold("ztsurv", graphs, train, test, ZTSurvConfig(hidden=8, epochs=30, lr=1e-2), fold=0)
    assert result.loss_history[-1] < result.loss_history[0]
    assert result.test_risk.shape == (len(test),) and 0 <= result.c_index <= 1
    assert set(result.state_dict) and sorted(result.test_index) == sorted(test)


def test_slide_graph_runs_segmentation_then_graph():
    rgb, tissue, til, _ = known_tile(np.random.default_rng(1))
    labels, table, graph = slide_graph(rgb, tissue, til, ZTSurvConfig(cell_px=6))
    assert labels.shape == tissue.shape and table["present"].shape == (8, 8, 3)
    assert graph["lymphocyte"].num_nodes >= 4 and graph["tumour"].num_nodes >= 16


def test_metrics_record_rows_baseline_headline_and_compute_table():
    from paperline.methods.ztsurv.pipeline import CohortGraphs
    from paperline.methods.ztsurv.summary import method_metrics

    def row(c):
        return {"c_index_mean": c, "c_index_std": 0.1, "c_index_min": c - 0.1, "c_index_max": c + 0.1,
                "c_index_oof": c, "logrank_p": None}

    rows = {"composition_cox": row(0.5), "mean_pool": row(0.6), "abmil": row(0.55), "ztsurv": row(0.7)}
    labels = {"p0": np.full((4, 4), TUMOUR), "p1": np.full((4, 4), STROMA)}
    cohort = CohortGraphs(["p0", "p1"], np.array([3.0, 5.0]), np.array([1, 0]), [], np.zeros((2, 3)), labels,
                          {"p0": "til-map", "p1": "stand-in"}, [{"patient_id": "p2"}])
    facts = {"p0": {"eta": 1.0, "tl_contact": 0.9}, "p1": {"eta": 0.0, "tl_contact": 0.1}}
    compute = {"slides": 2, "pixels_read_per_slide_50x": 10.0, "pixels_read_per_slide_20x": 1000.0,
               "pixels_processed_per_slide_50x": 5.0, "pixels_processed_per_slide_20x": 2000.0,
               "tiles_per_slide_20x": 3.0, "seconds_per_slide_50x": 0.1, "seconds_per_slide_20x": 2.0,
               "pixel_ratio_read": 100.0, "pixel_ratio_processed": 400.0, "time_ratio": 20.0}
    metrics = method_metrics(rows, cohort, compute, facts, {"p0": labels["p0"]}, "tiny")
    assert (metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == ("mean_pool", "c_index_mean", True)
    assert metrics.headline["gain_over_best_pooling"] == pytest.approx(0.1)
    assert metrics.headline["gain_over_composition_cox"] == pytest.approx(0.2)
    assert metrics.headline["c_index_generator_eta"] == 1.0 and metrics.headline["segmentation_dice_tumour"] == 1.0
    assert metrics.headline["compute_time_ratio"] == 20.0
    assert metrics.tables["compute_accounting"] == {
        "pipeline_50x": {"slides": 2, "pixels_read_per_slide": 10.0, "pixels_processed_per_slide": 5.0,
                         "seconds_per_slide": 0.1},
        "patch_tiles_20x": {"slides": 2, "pixels_read_per_slide": 1000.0, "pixels_processed_per_slide": 2000.0,
                            "tiles_per_slide": 3.0, "seconds_per_slide": 2.0}}
    assert metrics.details["cohort"] == {"patients": 2, "events": 1, "failed_slides": 1, "til_maps_real": 1,
                                         "til_maps_stand_in": 1}
    without = method_metrics({"composition_cox": row(0.5), "ztsurv": row(0.6)}, cohort, None, {}, {}, "tiny")
    assert without.baseline == "composition_cox" and without.tables == {} and "c_index_generator_eta" not in without.headline


def test_the_graphs_record_is_read_back_through_records_for_its_settings_only(tmp_path):
    from paperline.methods.ztsurv.pipeline import CohortGraphs, load_cohort_graphs
    from paperline.train.records import write_unit

    path = tmp_path / "graphs.pt"
    cohort = CohortGraphs(["p0"], np.array([1.0]), np.array([True]), [], np.zeros((1, 3)), {}, {}, [])
    write_unit(path, {"config": {"cell_px": 5}}, cohort.__dict__)
    assert load_cohort_graphs(path, {"config": {"cell_px": 5}}).patient_ids == ["p0"]
    with pytest.raises(FileNotFoundError):
        load_cohort_graphs(path, {"config": {"cell_px": 7}})
