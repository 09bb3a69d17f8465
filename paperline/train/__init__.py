"""Shared training pieces: the LM loop, checkpoint/resume, distributed settings."""
