"""Hooks into training: the Trainer callback and checkpoint watching.
"""
