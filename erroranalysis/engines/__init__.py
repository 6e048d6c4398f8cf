"""Where batches run: in-process (the default) and, for users who outgrow one machine, Ray Data.
"""
