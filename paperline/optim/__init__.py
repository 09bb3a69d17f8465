"""Optimizers shared by the methods (GaLore, SUMO, NGN-M, AltLoRA, ...), pure torch."""
