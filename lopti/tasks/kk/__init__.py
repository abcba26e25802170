"""Knights and Knaves: puzzles with a proven unique solution, their prompts, traces and the paper's reward; the tiny
model built for them and its supervised warm start."""
