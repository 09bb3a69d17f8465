"""Memory Decoder (Cao et al., NeurIPS 2025): a small LM trained to imitate a kNN-LM retriever's
next-token distributions on a domain corpus, mixed at inference with frozen base LMs of the same
tokenizer. Data (corpora.py), datastore and kNN targets (datastore.py, knn.py), the MemDec loss,
training and mixing (memdec.py), config (config.py), figures (plots.py)."""
