"""Data checks over arrays: label issues (confident learning), duplicates and leakage, distribution shift.
"""
