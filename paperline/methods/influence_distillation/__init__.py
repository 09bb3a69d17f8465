"""Influence Distillation (Nikdan et al., arXiv 2505.19051): landmark-based data selection for LLM fine-tuning."""
