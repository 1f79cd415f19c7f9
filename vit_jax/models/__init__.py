"""The model zoo: presets by their original names, a factory for them, and their families.

`MODEL_CONFIGS` maps every preset name to its architecture config; `get_model(name,
**overrides)` builds one. Each preset belongs to a family (`families.FAMILIES`: 'vit' for
ViT and its ResNet hybrids, 'mixer' for MLP-Mixer), the class every other part of the
package asks about a model; `register_family` adds one.
"""
import dataclasses
from types import MappingProxyType
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from vit_jax import errors
from vit_jax.models import families
from vit_jax.models import mixer
from vit_jax.models import presets
from vit_jax.models import vit
from vit_jax.models.mixer import MlpMixer
from vit_jax.models.vit import VisionTransformer

__all__ = ['MODEL_CONFIGS', 'get_model', 'get_model_config', 'VisionTransformer',
           'MlpMixer', 'resolve_dtype', 'register_family', 'family_of']

_DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16,
           'float16': jnp.float16}
DTYPES = ('auto',) + tuple(_DTYPES)

for _family in (vit.FAMILY, mixer.FAMILY):
  families.register(_family, {
      name: cfg for name, cfg in presets.PRESETS.items()
      if cfg.get(families.FAMILY_KEY) == _family.name})

MODEL_CONFIGS = families.MODEL_CONFIGS
register_family = families.register
config_section = families.config_section


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


def unknown_model(name: str, aliases: Mapping[str, str] = MappingProxyType({})) -> str:
  """The one-line message for an unknown model: the closest names, then where all are listed.

  `aliases` (short name -> preset) are names a config argument also takes.
  """
  show = lambda n: f'{n} ({aliases[n]})' if n in aliases else n
  hint = errors.did_you_mean(name, [*aliases, *MODEL_CONFIGS], show)
  # The full list (50 names) would bury the suggestion; the list command shows it.
  return f'Unknown model {name!r} ({hint + " " if hint else ""}all: python -m vit_jax.list).'


def get_model_config(name: str) -> ml_collections.ConfigDict:
  """Returns an unlocked copy of the preset `name`, or a one-line error."""
  if name not in MODEL_CONFIGS:
    raise ValueError(unknown_model(name))
  return ml_collections.ConfigDict(MODEL_CONFIGS[name].to_dict())


def family_of(model_or_name: Any) -> families.Family:
  """The family (a `families.Family`) of a preset name, a preset config or a built model."""
  if isinstance(model_or_name, nn.Module):
    return families.of_module(model_or_name)
  if isinstance(model_or_name, str):
    return families.of_config(get_model_config(model_or_name))
  return families.of_config(model_or_name)


def _plain(value: Any) -> Any:
  """Turns ConfigDicts and lists into hashable dicts/tuples for module fields."""
  if isinstance(value, (ml_collections.ConfigDict, dict)):
    return {k: _plain(v) for k, v in dict(value).items()}
  if isinstance(value, list):
    return tuple(_plain(v) for v in value)
  return value


def get_model(name: str, num_classes: int = 1000, **overrides: Any) -> nn.Module:
  """Builds the preset `name` with `overrides` of its module's fields (or nested ones).

  Examples: get_model('ViT-B_16', num_classes=10, dtype='bfloat16'),
  get_model('ViT-B_16', dtype='auto') (bf16 on accelerators, fp32 on CPU),
  get_model('ViT-B_16', num_layers=6, representation_size=768).
  """
  kwargs = _plain(get_model_config(name))
  family = families.of_config(kwargs)
  kwargs.pop(families.FAMILY_KEY, None)
  kwargs['num_classes'] = num_classes
  allowed = {f.name for f in dataclasses.fields(family.module)} - {'parent', 'name'}
  nested = [k for k in family.nested if k in kwargs]
  for key, value in overrides.items():
    owner = next((n for n in nested if key in kwargs[n]), None)
    if key in allowed:
      kwargs[key] = _plain(value)
    elif owner is not None:
      kwargs[owner] = {**kwargs[owner], key: value}
    else:
      valid = sorted(allowed | {k for n in nested for k in kwargs[n]})
      raise ValueError(f'Unknown override {key!r} for model {name!r}; valid '
                       f'keys: {", ".join(valid)}.')
  if 'dtype' in kwargs:
    kwargs['dtype'] = resolve_dtype(kwargs['dtype'])
  return family.module(**kwargs)
