"""Prefect tasks: wrap library calls; own MLflow, device choice, GPU gating and checkpoint paths."""
