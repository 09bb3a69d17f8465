"""QFFT, question-free fine-tuning (Liu et al., NeurIPS 2025): fine-tune a short-CoT model on
long-CoT responses alone, without their questions, so it keeps answering briefly by default and
reflects ("Wait, ...") when it needs to. Data (data.py), decoding (generate.py), RAK/AES
(metrics.py), HF model loading (hf.py), config (config.py), figures (plots.py)."""
