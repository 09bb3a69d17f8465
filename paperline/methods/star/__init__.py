"""STAR (Bai et al., NeurIPS 2025): preference-based RL with preference margin regularisation (PMR)
and policy regularisation (PR), against PEBBLE, SURF and the true-reward oracle, online on a
continuous task (SAC) and on a grid world (DQN with an in-sample value-iteration graph)."""
