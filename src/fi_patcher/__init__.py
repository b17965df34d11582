"""fi-patch: patch FlashInfer's CUDA version check in a chosen environment, and prove it there."""

__version__ = "0.3.0"
