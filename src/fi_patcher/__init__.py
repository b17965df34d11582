"""fi-patch: patch an installed FlashInfer in a chosen environment so that torch.compile can trace
FP4 quantization, and prove it there."""

__version__ = "0.28.0"
