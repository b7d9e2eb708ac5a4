"""Mizuoto: text-to-speech and voice engines in native PyTorch on one acceleration runtime.

Importing this package is cheap and does not import torch.
"""

__version__ = "0.1.0"
