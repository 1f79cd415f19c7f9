"""Model parameters as files: the original vit_jax's public checkpoint API.

`load(path) -> params`, `save(params, path)` (the published .npz layout) and
`load_pretrained(pretrained_path=, init_params=, model_config=)` (fit a checkpoint to a
model for fine-tuning), under the names the original repo's users call. The formats live
in `vit_jax.models.formats`, the fitting in `vit_jax.models.pretrained`.
"""
from vit_jax.models.formats.npz import load
from vit_jax.models.formats.npz import save
from vit_jax.models.pretrained import interpolate_posemb
from vit_jax.models.pretrained import load_pretrained

__all__ = ['load', 'save', 'load_pretrained', 'interpolate_posemb']
