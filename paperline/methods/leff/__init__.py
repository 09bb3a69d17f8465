"""LEFF: layer-wise efficient federated fine-tuning, on Flower."""
