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


# Option markers meaning "keep the preset's value" (others are passed to the module).
_KEEPS = (families.KEEP, None, '')


def _keeps(marker: Any, value: Any) -> bool:
  """Whether `value` is the marker `marker` that keeps the preset's value."""
  return any(marker is k or (k is not None and marker == k) for k in _KEEPS) and (
      value is marker or (marker is not None and value == marker))


def _not_set(key: str, value: Any) -> bool:
  """Whether `value` is the "not set" value some family gives option `key`."""
  return any(key in f.options and (f.options[key] == value if value is not None
                                   else f.options[key] is None)
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
      if _keeps(family.options[key], value):
        continue  # the preset's value
      if key == 'representation_size':
        value = value or None  # 0: no pre-logits layer
      if key == 'layer_scale':
        value = value or None  # 0: no layer scale
    elif _not_set(key, value):
      continue  # another family's option, left unset
    elif any(key in f.options for f in families.FAMILIES.values()):
      raise ValueError(
          f'config.model.{key}={value!r} does not apply to {model_name} (a '
          f'{family.name} model, whose options are {", ".join(family.options)}); '
          'leave it unset.')
    out[key] = value
  if out.get('num_classes', families.KEEP) == families.KEEP:
    out['num_classes'] = num_classes
  return out


def build(config: ml_collections.ConfigDict, num_classes: int) -> nn.Module:
  """The flax module of config.model_name with config.model applied."""
  return models.get_model(config.model_name,
                          **model_kwargs(config.model_name, config.model, num_classes))
