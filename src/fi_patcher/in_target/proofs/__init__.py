"""One proof per patch, run by `prove.py` in the target: see that module for the contract."""
