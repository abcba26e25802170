"""Tasks with verifiable rewards: data generation, prompts and reward functions."""
