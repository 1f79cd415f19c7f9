"""The architecture a ViT or hybrid parameter tree implies, for the checkpoint formats.

vit_jax/models/formats/arch.py asks the family of a tree for these; it knows no tree.
"""
import re
from typing import Any, Mapping, Optional

from vit_jax.models import families
from vit_jax.models.vit import tree

# The presets a tree that fits none is built from, every architecture field overridden.
BASE_PRESETS = {'vit': 'ViT-B_16', 'hybrid': 'R50+ViT-B_16'}


def owns(params: Mapping[str, Any]) -> bool:
  """Whether a tree is a ViT's or a hybrid's (a patch embedding or a Transformer)."""
  return 'embedding' in params or 'Transformer' in params


def kind(fields: Mapping[str, Any]) -> str:
  """'hybrid' for a ViT on ResNet features, else 'vit'."""
  return 'hybrid' if fields.get('resnet') else 'vit'


def architecture(params: Mapping[str, Any], source: str) -> dict:
  """get_model fields of the ViT/hybrid that `params` fit, from their shapes."""
  kernel = families.shape_at(params, 'embedding', 'kernel')
  query = families.shape_at(params, 'Transformer', 'encoderblock_0',
                            'MultiHeadDotProductAttention_0', 'query', 'kernel')
  mlp = families.get_path(params, ('Transformer', 'encoderblock_0', 'MlpBlock_0')) or {}
  dense = families.shape_at(mlp, 'gate' if 'gate' in mlp else 'Dense_0', 'kernel')
  if kernel is None or len(kernel) != 4 or query is None or len(query) != 3 or (
      dense is None):
    raise ValueError(f'{source}: no ViT patch embedding and encoder blocks '
                     '(embedding/kernel, Transformer/encoderblock_0/...); this '
                     'fits no vit_jax model.')
  width = kernel[3]
  if query[0] != width or dense[0] != width:
    raise ValueError(f'{source}: embedding width {width} but encoder block '
                     f'width {query[0]}; this fits no vit_jax model.')
  depth = sum(1 for k in params['Transformer'] if re.fullmatch(r'encoderblock_\d+', k))
  arch: dict[str, Any] = {
      'patches': {'size': tuple(kernel[:2])},
      'hidden_size': width,
      'transformer': {'mlp_dim': dense[1], 'num_heads': query[1], 'num_layers': depth},
      # timm pools the tokens averaged when it normalises after pooling (fc_norm).
      'classifier': ('map' if 'MAPHead_0' in params else
                     'token' if 'cls' in params and 'fc_norm' not in params else 'gap'),
      'class_token': 'cls' in params,
      'representation_size': (families.shape_at(params, 'pre_logits', 'kernel') or
                              (None, None))[1],
      'num_classes': (families.shape_at(params, 'head', 'kernel') or (None, 0))[1],
      'resnet': None,
      'fc_norm': 'fc_norm' in params,
  }
  if 'conv_root' in params:
    root = families.shape_at(params, 'conv_root', 'kernel')
    units = []
    i = 1
    while f'block{i}' in params:
      units.append(sum(1 for k in params[f'block{i}'] if re.fullmatch(r'unit\d+', k)))
      i += 1
    arch['resnet'] = {'num_layers': tuple(units), 'width_factor': root[3] / 64}
  return arch


def misfits(cfg: Mapping[str, Any], arch: Mapping[str, Any], ignore_heads: bool) -> list[str]:
  """The fields (beyond the patch size) where `arch` differs from the preset `cfg`."""
  diff = []
  if cfg['hidden_size'] != arch['hidden_size']:
    diff.append(f'hidden_size {arch["hidden_size"]} != {cfg["hidden_size"]}')
  for key in ('mlp_dim', 'num_layers') + (() if ignore_heads else ('num_heads',)):
    if cfg['transformer'][key] != arch['transformer'][key]:
      diff.append(f'{key} {arch["transformer"][key]} != {cfg["transformer"][key]}')
  has_token = cfg['classifier'] in ('token', 'token_unpooled')
  if has_token != arch['class_token']:
    diff.append('class token' + (' missing' if has_token else ' present'))
  if cfg.get('resnet'):
    resnet = arch['resnet']
    if tuple(cfg['resnet']['num_layers']) != tuple(resnet['num_layers']) or (
        cfg['resnet']['width_factor'] != resnet['width_factor']):
      diff.append(f'resnet {resnet} != {cfg["resnet"]}')
  return diff


def describe(arch: Mapping[str, Any]) -> str:
  """A short description of an architecture, for error messages."""
  t = arch['transformer']
  hybrid = f'ResNet {arch["resnet"]["num_layers"]} + ' if arch['resnet'] else ''
  return (f'{hybrid}width {arch["hidden_size"]}, {t["num_layers"]} layers, MLP '
          f'{t["mlp_dim"]}, patch {arch["patches"]["size"][0]}')


def size_pairs(got: Mapping[str, Any], want: Mapping[str, Any]) -> dict[str, tuple]:
  """{size name: (got's, want's)} of two architectures, for 'width 32 vs 96' messages."""
  sizes = {'layers': 'num_layers', 'heads': 'num_heads', 'MLP': 'mlp_dim'}
  return {'width': (got['hidden_size'], want['hidden_size']),
          **{name: (got['transformer'][key], want['transformer'][key])
             for name, key in sizes.items()},
          'class token': tuple('yes' if a['class_token'] else 'no' for a in (got, want)),
          'ResNet': tuple(a['resnet'] and tuple(a['resnet']['num_layers'])
                          for a in (got, want))}


def checkpoint_fields(params: Mapping[str, Any], arch: Mapping[str, Any],
                      options: Optional[Mapping[str, Any]]) -> dict:
  """get_model fields a checkpoint fixes beyond its preset: head, options of the tree.

  `options` (what the format recorded or the caller gave) win over defaults, not over
  what the tree shows (a SwiGLU gate).
  """
  free = {'num_classes': arch['num_classes'],
          'representation_size': arch['representation_size']}
  # Every field, defaults included: a preset with other values (a -reg4 one) must not leak them.
  fixed = dict(tree.fields_from_params(params))
  fixed['classifier'] = arch['classifier']
  if arch['class_token'] != (arch['classifier'] == 'token'):
    fixed['class_token'] = arch['class_token']
  free.update(fixed)
  free.update(options or {})
  if fixed.get('activation') == 'swiglu':  # the tree's gate/value: no caller's guess
    free['activation'] = 'swiglu'
  return free


def preset_overrides(arch: Mapping[str, Any]) -> dict:
  """get_model overrides that set every architecture field of `arch` on a base preset."""
  overrides = {k: v for k, v in arch.items() if k not in ('transformer', 'class_token')}
  overrides.update(arch['transformer'])
  if overrides.get('resnet') is None:
    overrides.pop('resnet', None)
  return overrides
