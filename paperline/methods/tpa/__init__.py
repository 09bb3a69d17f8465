"""TPA / T6 (Zhang et al., NeurIPS 2025): tensor product attention against MHA, MQA, GQA and MLA at
equal attention parameters, on the shared causal LM (`paperline.nn.causal_lm`)."""
