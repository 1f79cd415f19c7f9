"""The architecture a parameter tree implies, and the preset (plus overrides) that builds it."""
import dataclasses
import re
from typing import Any, Mapping, Optional

from absl import logging
import flax.linen as nn
import numpy as np

from vit_jax import models
from vit_jax.models import families
from vit_jax.models.formats import timm

Params = dict[str, Any]
# Architectures for checkpoints that fit no preset: every field is overridden.
_BASE_PRESETS = {'vit': 'ViT-B_16', 'hybrid': 'R50+ViT-B_16', 'mixer': 'Mixer-B_16'}


@dataclasses.dataclass(frozen=True)
class Checkpoint:
  """Parameters read from any format, with the architecture they imply."""
  params: Params
  model_name: str
  overrides: dict
  format: str
  path: str

  def get_model(self, **overrides: Any) -> nn.Module:
    """The flax module these parameters fit (`overrides` win, e.g. num_classes)."""
    return models.get_model(self.model_name, **{**self.overrides, **overrides})


def _shape(tree: Mapping[str, Any], *path: str) -> Optional[tuple]:
  node = tree
  for key in path:
    if not isinstance(node, Mapping) or key not in node:
      return None
    node = node[key]
  return tuple(np.shape(node))


def architecture(params: Mapping[str, Any], source: str = 'Parameters'
                 ) -> dict:
  """get_model fields of the ViT/hybrid/Mixer that `params` fit, from their shapes.

  `source` starts the error messages ('Checkpoint PATH').
  """
  if 'stem' in params:
    stem = _shape(params, 'stem', 'kernel')
    tok = _shape(params, 'MixerBlock_0', 'token_mixing', 'Dense_0', 'kernel')
    ch = _shape(params, 'MixerBlock_0', 'channel_mixing', 'Dense_0', 'kernel')
    if stem is None or tok is None or ch is None or len(stem) != 4:
      raise ValueError(f'{source}: a Mixer stem but no Mixer blocks; this fits '
                       'no vit_jax model.')
    blocks = sum(1 for k in params if re.fullmatch(r'MixerBlock_\d+', k))
    head = _shape(params, 'head', 'kernel')
    return {'patches': {'size': tuple(stem[:2])}, 'hidden_dim': stem[3],
            'num_blocks': blocks, 'tokens_mlp_dim': tok[1],
            'channels_mlp_dim': ch[1], 'num_classes': head[1] if head else 0}
  kernel = _shape(params, 'embedding', 'kernel')
  query = _shape(params, 'Transformer', 'encoderblock_0',
                 'MultiHeadDotProductAttention_0', 'query', 'kernel')
  mlp = families.get_path(params, ('Transformer', 'encoderblock_0', 'MlpBlock_0')) or {}
  dense = _shape(mlp, 'gate' if 'gate' in mlp else 'Dense_0', 'kernel')  # SwiGLU: gate
  if kernel is None or len(kernel) != 4 or query is None or len(query) != 3 or (
      dense is None):
    raise ValueError(f'{source}: no ViT patch embedding and encoder blocks '
                     '(embedding/kernel, Transformer/encoderblock_0/...); this '
                     'fits no vit_jax model.')
  width = kernel[3]
  if query[0] != width or dense[0] != width:
    raise ValueError(f'{source}: embedding width {width} but encoder block '
                     f'width {query[0]}; this fits no vit_jax model.')
  layers = sum(1 for k in params['Transformer']
               if re.fullmatch(r'encoderblock_\d+', k))
  arch: dict[str, Any] = {
      'patches': {'size': tuple(kernel[:2])},
      'hidden_size': width,
      'transformer': {'mlp_dim': dense[1], 'num_heads': query[1],
                      'num_layers': layers},
      # timm pools the tokens averaged when it normalises after pooling (fc_norm).
      'classifier': ('map' if 'MAPHead_0' in params else
                     'token' if 'cls' in params and 'fc_norm' not in params else 'gap'),
      'class_token': 'cls' in params,
      'representation_size': (_shape(params, 'pre_logits', 'kernel') or
                              (None, None))[1],
      'num_classes': (_shape(params, 'head', 'kernel') or (None, 0))[1],
      'resnet': None,
      'fc_norm': 'fc_norm' in params,
  }
  if 'conv_root' in params:
    root = _shape(params, 'conv_root', 'kernel')
    units = []
    i = 1
    while f'block{i}' in params:
      units.append(sum(1 for k in params[f'block{i}']
                       if re.fullmatch(r'unit\d+', k)))
      i += 1
    arch['resnet'] = {'num_layers': tuple(units), 'width_factor': root[3] / 64}
  return arch


def _kind(arch: Mapping[str, Any]) -> str:
  if 'num_blocks' in arch:
    return 'mixer'
  return 'hybrid' if arch.get('resnet') else 'vit'


def _fit(preset: str, arch: Mapping[str, Any], ignore_heads: bool = False
         ) -> list[str]:
  """The fields where `arch` differs from the preset (empty: it fits)."""
  cfg = models.get_model_config(preset).to_dict()
  if _kind(arch) != _kind(cfg):
    return [f'a {_kind(arch)} checkpoint, a {_kind(cfg)} model']
  diff = []
  if tuple(cfg['patches']['size']) != tuple(arch['patches']['size']):
    diff.append(f'patch size {tuple(arch["patches"]["size"])} != '
                f'{tuple(cfg["patches"]["size"])}')
  if 'num_blocks' in cfg:
    for key in ('hidden_dim', 'num_blocks', 'tokens_mlp_dim', 'channels_mlp_dim'):
      if cfg[key] != arch[key]:
        diff.append(f'{key} {arch[key]} != {cfg[key]}')
    return diff
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


def fitting_presets(arch: Mapping[str, Any], ignore_heads: bool = False) -> list[str]:
  """Presets whose architecture `arch` matches (heads ignored on request)."""
  return [name for name in models.MODEL_CONFIGS
          if not _fit(name, arch, ignore_heads)]


def describe(arch: Mapping[str, Any]) -> str:
  """A short description of an architecture, for error messages."""
  if 'num_blocks' in arch:
    return (f'Mixer width {arch["hidden_dim"]}, {arch["num_blocks"]} blocks, '
            f'patch {arch["patches"]["size"][0]}')
  t = arch['transformer']
  hybrid = f'ResNet {arch["resnet"]["num_layers"]} + ' if arch['resnet'] else ''
  return (f'{hybrid}width {arch["hidden_size"]}, {t["num_layers"]} layers, MLP '
          f'{t["mlp_dim"]}, patch {arch["patches"]["size"][0]}')


def differences(got: Mapping[str, Any], want: Mapping[str, Any]) -> list[str]:
  """Where architecture `got` (a checkpoint's) differs from `want`, as 'width 32 vs 96'."""
  if _kind(got) != _kind(want):
    return [f'{_kind(got)} vs {_kind(want)}']
  if 'num_blocks' in got:  # Mixer
    sizes = {'width': 'hidden_dim', 'blocks': 'num_blocks',
             'token MLP': 'tokens_mlp_dim', 'channel MLP': 'channels_mlp_dim'}
    pairs = {name: (got[key], want[key]) for name, key in sizes.items()}
  else:
    sizes = {'layers': 'num_layers', 'heads': 'num_heads', 'MLP': 'mlp_dim'}
    pairs = {'width': (got['hidden_size'], want['hidden_size']),
             **{name: (got['transformer'][key], want['transformer'][key])
                for name, key in sizes.items()},
             'class token': tuple('yes' if a['class_token'] else 'no' for a in (got, want)),
             'ResNet': tuple(a['resnet'] and tuple(a['resnet']['num_layers'])
                             for a in (got, want))}
  pairs['patch'] = tuple('x'.join(map(str, a['patches']['size'])) for a in (got, want))
  return [f'{name} {a} vs {b}' for name, (a, b) in pairs.items() if a != b]


def resolve_model(model: str) -> str:
  """A preset name for `model`: a preset itself or a timm model name."""
  if model in models.MODEL_CONFIGS:
    return model
  preset = timm.preset_for(model)
  if preset:
    return preset
  raise ValueError(f'Unknown model {model!r}: neither a vit_jax preset nor a timm '
                   f'model name that is one ({", ".join(sorted(timm.TIMM_PRESETS))}'
                   '); for other architectures pass --num_heads instead.')


def check_fit(path: str, preset: str, arch: Mapping[str, Any],
              ignore_heads: bool = False) -> None:
  """One-line error unless `arch` fits `preset`, naming the presets it does fit."""
  diff = _fit(preset, arch, ignore_heads)
  if diff:
    fits = fitting_presets(arch, ignore_heads)
    # A timm file's size may have no preset: then only the heads are missing.
    other = ' or pass --num_heads instead' if ignore_heads else ''
    raise ValueError(f'Checkpoint {path} does not fit model {preset!r}: '
                     f'{"; ".join(diff[:3])}. Pick the model it was trained as'
                     f'{other} (shapes fit: {", ".join(fits) or "no preset"}).')


def _variant_fields(params: Params, arch: Mapping[str, Any]) -> dict:
  """The ViT options the tree fixes (the family's reading), without their defaults."""
  # Every field, defaults included: a preset with other values (a -reg4 one) must not leak them.
  out = dict(families.FAMILIES['vit'].fields_from_params(params))
  out['classifier'] = arch['classifier']
  if arch['class_token'] != (arch['classifier'] == 'token'):
    out['class_token'] = arch['class_token']
  return out


def _closest(fits: list[str], fields: Mapping[str, Any]) -> str:
  """The preset among `fits` whose own variant fields agree most with `fields`."""
  def agree(name: str) -> int:
    cfg = models.get_model_config(name).to_dict()
    return sum(1 for k, v in fields.items() if k in cfg and cfg[k] == v)
  return max(fits, key=agree)  # ties: the first, as before


def as_checkpoint(params: Params, arch: dict, model: Optional[str], fmt: str,
                  path: str, options: Optional[Mapping[str, Any]] = None) -> Checkpoint:
  """Names the preset `params` fit (or `model`, checked) and its overrides.

  `options` are the ViT options the format recorded (or the caller gave) and the
  tree does not: activation, LayerNorm epsilon, pooling; they win.
  """
  free = {'num_classes': arch['num_classes']}
  if 'num_blocks' not in arch:
    free['representation_size'] = arch['representation_size']
    tree = _variant_fields(params, arch)
    free.update(tree)
    free.update(options or {})
    if tree.get('activation') == 'swiglu':  # the tree's gate/value: no caller's guess
      free['activation'] = 'swiglu'
  if model is not None:
    preset = resolve_model(model)
    check_fit(path, preset, arch)
    return Checkpoint(params, preset, free, fmt, path)
  fits = fitting_presets(arch)
  if fits:
    return Checkpoint(params, _closest(fits, free), free, fmt, path)
  # No preset: the closest family's preset with every architecture field set.
  overrides = {k: v for k, v in arch.items() if k not in ('transformer', 'class_token')}
  if 'transformer' in arch:
    overrides.update(arch['transformer'])
  if overrides.get('resnet') is None:
    overrides.pop('resnet', None)
  overrides.update(free)
  logging.info('Checkpoint %s fits no preset; using %s with overrides %s', path,
               _BASE_PRESETS[_kind(arch)], overrides)
  return Checkpoint(params, _BASE_PRESETS[_kind(arch)], overrides, fmt, path)
