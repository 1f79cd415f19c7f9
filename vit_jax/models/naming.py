"""The one name of a built model in what the commands print: a preset only when it is one.

A preset's name is used when every shape of the model (width, depth, heads, MLP, patch size,
ResNet stem) is the preset's; otherwise the model is described by its shape, e.g.
'ViT 96w x 6L, 7px patches' for the quickstart model built from ViT-Ti_16 with overrides.
"""
import dataclasses
from typing import Any, Mapping

import flax.linen as nn

from vit_jax import models

# The fields that fix a model's shape (transformer fields are nested under 'transformer').
_SHAPE_KEYS = ('hidden_size', 'hidden_dim', 'num_blocks', 'tokens_mlp_dim', 'channels_mlp_dim',
               'num_layers', 'num_heads', 'mlp_dim', 'patch', 'resnet')


def _plain(value: Any) -> Any:
  if isinstance(value, Mapping):
    return {k: _plain(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return tuple(_plain(v) for v in value)
  return value


def shape(fields: Mapping[str, Any]) -> dict[str, Any]:
  """The shape fields of a model's fields or preset config (transformer fields lifted)."""
  fields = _plain(fields)
  flat = {**fields, **(fields.get('transformer') or {})}
  patches = flat.get('patches') or {}
  flat['patch'] = tuple(patches.get('size') or patches.get('grid') or ())
  return {k: flat.get(k) for k in _SHAPE_KEYS}


def module_fields(model: nn.Module) -> dict[str, Any]:
  """The dataclass fields of a built flax module."""
  return {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
          if f.name not in ('parent', 'name')}


def describe(fields: Mapping[str, Any]) -> str:
  """'ViT 96w x 6L, 7px patches' (or a Mixer's blocks, a hybrid's ResNet stem)."""
  s = shape(fields)
  patch = s['patch']
  px = (f'{patch[0]}px' if len(set(patch)) == 1 else 'x'.join(map(str, patch)) + 'px')
  if s['num_blocks'] is not None:
    return f'Mixer {s["hidden_dim"]}w x {s["num_blocks"]} blocks, {px} patches'
  if s['resnet']:
    # A hybrid's patches cut the ResNet's feature map, not the image.
    layers = ','.join(map(str, s['resnet'].get('num_layers') or ()))
    return (f'ResNet({layers})+ViT {s["hidden_size"]}w x {s["num_layers"]}L, '
            f'{"x".join(map(str, patch))} patches of its features')
  return f'ViT {s["hidden_size"]}w x {s["num_layers"]}L, {px} patches'


def label(model: nn.Module, preset: str) -> str:
  """`preset` when the model has every shape of that preset, else describe(model)."""
  fields = module_fields(model)
  if preset in models.MODEL_CONFIGS and (
      shape(models.get_model_config(preset).to_dict()) == shape(fields)):
    return preset
  return describe(fields)
