"""SUMO (Refael et al., NeurIPS 2025): exact-SVD moment orthogonalization in a rank-r subspace,
against AdamW, GaLore-AdamW and Muon. The optimizers are in paperline/optim/; here are the
experiments: the Newton–Schulz-vs-SVD theory check and an MLP on real digits."""
