"""The model zoo: presets by their original names and a factory for them."""
import difflib
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from vit_jax.models.mixer import MlpMixer
from vit_jax.models.presets import MODEL_CONFIGS
from vit_jax.models.vit import VisionTransformer

__all__ = ['MODEL_CONFIGS', 'get_model', 'get_model_config', 'VisionTransformer',
           'MlpMixer', 'is_mixer', 'resolve_dtype']

# Fields beyond the architecture that every ViT accepts.
_VIT_EXTRA = ('num_classes', 'representation_size', 'classifier',
              'head_bias_init', 'dtype', 'attention', 'remat',
              'stochastic_depth', 'resnet', 'attention_pad_multiple',
              'scan_layers', 'patch_embedding')
_MIXER_EXTRA = ('num_classes', 'dtype')
_DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16,
           'float16': jnp.float16}


DTYPES = ('auto',) + tuple(_DTYPES)


def resolve_dtype(dtype: Any, backend: str = '') -> Any:
  """The compute dtype for a name: 'auto' is bfloat16 on GPU/TPU, float32 on CPU.

  bf16 matrix units make it the fast path on accelerators; XLA:CPU emulates
  bf16 products, so there float32 is both faster and exact.
  """
  if not isinstance(dtype, str):
    return dtype
  if dtype == 'auto':
    backend = backend or jax.default_backend()
    return jnp.float32 if backend == 'cpu' else jnp.bfloat16
  if dtype not in _DTYPES:
    raise ValueError(f'Unknown dtype {dtype!r}; use one of '
                     f'{", ".join(DTYPES)}.')
  return _DTYPES[dtype]


def is_mixer(config: Any) -> bool:
  """Whether a model config describes an MLP-Mixer rather than a ViT."""
  return 'num_blocks' in config


def get_model_config(name: str) -> ml_collections.ConfigDict:
  """Returns an unlocked copy of the preset `name`, or a one-line error."""
  if name not in MODEL_CONFIGS:
    close = difflib.get_close_matches(name, MODEL_CONFIGS, n=3, cutoff=0.4)
    hint = f' Did you mean {", ".join(map(repr, close))}?' if close else ''
    raise ValueError(f'Unknown model {name!r}.{hint} Known models: '
                     f'{", ".join(sorted(MODEL_CONFIGS))}.')
  return ml_collections.ConfigDict(MODEL_CONFIGS[name].to_dict())


def _plain(value: Any) -> Any:
  """Turns ConfigDicts and lists into hashable dicts/tuples for module fields."""
  if isinstance(value, (ml_collections.ConfigDict, dict)):
    return {k: _plain(v) for k, v in dict(value).items()}
  if isinstance(value, list):
    return tuple(_plain(v) for v in value)
  return value


def get_model(name: str, num_classes: int = 1000, **overrides: Any) -> nn.Module:
  """Builds the preset `name` with `overrides` of its fields (or transformer's).

  Examples: get_model('ViT-B_16', num_classes=10, dtype='bfloat16'),
  get_model('ViT-B_16', dtype='auto') (bf16 on accelerators, fp32 on CPU),
  get_model('ViT-B_16', num_layers=6, representation_size=768).
  """
  kwargs = _plain(get_model_config(name))
  kwargs['num_classes'] = num_classes
  allowed = set(kwargs) | set(_MIXER_EXTRA if is_mixer(kwargs) else _VIT_EXTRA)
  for key, value in overrides.items():
    if key in allowed:
      kwargs[key] = _plain(value)
    elif key in kwargs.get('transformer', {}):
      kwargs['transformer'] = {**kwargs['transformer'], key: value}
    else:
      valid = sorted(allowed | set(kwargs.get('transformer', {})))
      raise ValueError(f'Unknown override {key!r} for model {name!r}; valid '
                       f'keys: {", ".join(valid)}.')
  if 'dtype' in kwargs:
    kwargs['dtype'] = resolve_dtype(kwargs['dtype'])
  return (MlpMixer if is_mixer(kwargs) else VisionTransformer)(**kwargs)
