"""ZTSurv (NeurIPS 2025, Tang, Shao, Zhang): zero-shot TME segmentation of 50x WSIs, a heterogeneous graph, Cox survival."""
