"""LoTA-QAF (Chen et al. 2025): ternary low-rank adapters merged losslessly into an int-b quantised model."""
