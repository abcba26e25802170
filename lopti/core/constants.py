"""The paper's constants (docs/paper.md §4, §5, §7, §8): each default in lopti that follows the paper names one.

Library defaults that switch a method off (`ar_alpha=0`, `lopti=False`, `dual_clip=None` in
`LoptiGRPOConfig`, so that it trains like TRL's GRPOTrainer) are not the paper's values; the recipes,
`lopti compare` and the probe use these. AR's α depends on the task, so each task's record holds its own
(`Task.ar_alpha`, from §4, §7 and §8).
"""

LOPTI_ETA = 0.5  # §5: a token is low-probability when π_old < η
EPS_LOW, EPS_HIGH = 0.20, 0.24  # §7: the surrogate's clip range
DUAL_CLIP = 10.0  # §2, §7: the dual-clip constant c for negative advantages
