"""Deep neural collapse under cross-entropy (Garrod & Keating, NeurIPS 2025): the deep
unconstrained-feature model, its closed-form DNC and low-rank competitors, NC metrics, plots."""
