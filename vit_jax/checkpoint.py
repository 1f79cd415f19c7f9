"""Model parameters as files: the original vit_jax's public checkpoint API, and conversions.

`load(path) -> params`, `save(params, path)` (the published .npz layout) and
`load_pretrained(pretrained_path=, init_params=, model_config=)` (fit a checkpoint to a
model for fine-tuning; it reads .npz, timm and transformers checkpoints) keep the
original repo's names. `load_any`, `save_as` and `convert` read and write every format
(vit_jax.models.formats: .npz, timm state dicts, transformers directories).
"""
from typing import Any, Mapping, Optional

from vit_jax.models import formats
from vit_jax.models.formats.npz import load
from vit_jax.models.formats.npz import save
from vit_jax.models.pretrained import interpolate_posemb
from vit_jax.models.pretrained import load_pretrained

__all__ = ['load', 'save', 'load_pretrained', 'interpolate_posemb', 'load_any',
           'save_as', 'convert']


def load_any(path: str, *, model: Optional[str] = None,
             num_heads: Optional[int] = None) -> formats.Checkpoint:
  """Reads an .npz, timm or transformers checkpoint: params plus the model they fit.

  Returns a vit_jax.models.formats.Checkpoint (.params, .model_name, .overrides,
  .get_model()); timm state dicts need `model` (a preset or timm name) or `num_heads`.
  """
  return formats.read(path, model=model, num_heads=num_heads)


def save_as(params: Mapping[str, Any], path: str, *,
            to_format: Optional[str] = None, drop_head: bool = False) -> str:
  """Writes params as .npz, a timm state dict or a transformers directory; returns the format."""
  return formats.write(params, path, to_format=to_format, drop_head=drop_head)


def convert(from_path: str, to_path: str, **kwargs: Any) -> str:
  """Converts a checkpoint between .npz, timm and transformers; returns the format written."""
  return formats.convert(from_path, to_path, **kwargs)[1]
