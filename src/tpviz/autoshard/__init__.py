"""Automatic parallelization (chapter 9): Alpa's intra-op ILP and inter-op stage DP."""
