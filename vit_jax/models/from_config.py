"""The model a training config describes: config.model_name plus the config.model section.

config.model mixes architecture overrides (any field of the preset, e.g. hidden_size,
num_layers, patches) with the options of the model families (dtype, attention, remat,
...; `Family.options`). An option that the chosen family does not take is dropped while
it holds its "not set" value and is an error otherwise, so one config schema serves every
family.
"""
from typing import Any, Mapping

import flax.linen as nn
import ml_collections

from vit_jax import models
from vit_jax.models import families


# The "not set" values of config.model before UNSET, as config.json files of older runs hold them.
_LEGACY_UNSET = {'num_classes': -1, 'representation_size': -1, 'dropout_rate': -1,
                 'classifier': '', 'num_registers': -1, 'layer_scale': -1,
                 'layer_norm_epsilon': -1, 'activation': ''}


def is_unset(key: str, value: Any) -> bool:
  """Whether config.model.<key> holds "not set" (UNSET, or an older run's marker)."""
  return value is families.UNSET or (
      key in _LEGACY_UNSET and not isinstance(value, bool) and value == _LEGACY_UNSET[key])


def _not_set(key: str, value: Any) -> bool:
  """Whether `value` is the config default some family gives option `key` (UNSET or a value)."""
  return any(key in f.options and (is_unset(key, value) or f.options[key] == value)
             for f in families.FAMILIES.values())


def model_kwargs(model_name: str, model_config: Mapping[str, Any],
                 num_classes: int) -> dict[str, Any]:
  """get_model keyword arguments from a config.model section (sentinels resolved)."""
  family = models.family_of(model_name)
  section = (model_config.to_dict() if isinstance(model_config, ml_collections.ConfigDict)
             else dict(model_config))
  out = {}
  for key, value in section.items():
    if key in family.options:
      if is_unset(key, value):
        continue  # the preset's value
      if key in ('representation_size', 'layer_scale'):
        value = value or None  # 0: no pre-logits layer / no layer scale
    elif _not_set(key, value):
      continue  # another family's option, left unset
    elif any(key in f.options for f in families.FAMILIES.values()):
      raise ValueError(
          f'config.model.{key}={value!r} does not apply to {model_name} (a '
          f'{family.name} model, whose options are {", ".join(family.options)}); '
          'leave it unset.')
    out[key] = value
  if out.get('num_classes') is None:
    out['num_classes'] = num_classes
  return out


def build(config: ml_collections.ConfigDict, num_classes: int) -> nn.Module:
  """The flax module of config.model_name with config.model applied."""
  return models.get_model(config.model_name,
                          **model_kwargs(config.model_name, config.model, num_classes))
