"""Model Shapley (Chu, Jiang, Qiu, Gao, Zhao; NeurIPS 2025): a second-order closed form of the
Shapley value of parameters, neurons, heads and layers, φ = θ⊙g − ½θ⊙(Hθ), with a block-wise
empirical Fisher (EWMA over mini-batches) for H, against |θ|, |g·θ| and OBD, checked against
permutation-sampling Shapley values of a digits MLP's neurons and on the shared causal LM."""
