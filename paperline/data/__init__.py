"""Data formats and their real loaders, one module per domain (text, WSI, sEMG, ...)."""
