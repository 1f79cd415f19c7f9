"""Checkpoint file formats of model parameters (the published .npz layout)."""
