"""Reusable reinforcement-learning pieces (pure torch/numpy): a replay buffer whose rewards can be
relabelled, SAC and DQN backbones, a Bradley–Terry reward-model ensemble, a scripted (B-Pref)
teacher, and PEBBLE's state-entropy exploration reward."""
