"""Inference: classifier checkpoints, causal LMs and their generation, and the output checks of generations.

Each module is imported on its own (torch and transformers load inside functions).
"""
