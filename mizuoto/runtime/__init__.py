"""The shared acceleration runtime: request context, attention dispatch, and (later) graphs,
sampling and compilation. Importing this package does not import torch."""
