"""A cell's dry run: the cell executed on fake copies of the tensors, modules and optimizers it
reads, predicting its device errors and its peak memory per device before any GPU time is spent.
"""
