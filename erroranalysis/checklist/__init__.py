"""The rest of the training-run checklist: training signals, the memorization check, the doctor's report.
"""
