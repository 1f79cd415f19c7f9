"""The architecture a parameter tree implies, and the preset (plus overrides) that builds it.

Family-agnostic: the family that owns a tree reads it (`Family.architecture`, `misfits`,
`checkpoint_fields`, ...); this module only compares with the presets.
"""
import dataclasses
from typing import Any, Mapping, Optional

from absl import logging
import flax.linen as nn

from vit_jax import models
from vit_jax.models import families
from vit_jax.models.vit import timm

Params = dict[str, Any]


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


def _family_of_tree(params: Mapping[str, Any], source: str) -> families.Family:
  """The family whose tree `params` is (each family knows its own)."""
  for family in families.FAMILIES.values():
    if family.owns(params):
      return family
  raise ValueError(f'{source}: no model family ({", ".join(families.FAMILIES)}) knows '
                   f'its layers ({", ".join(sorted(params)[:4])}); this fits no vit_jax '
                   'model.')


def architecture(params: Mapping[str, Any], source: str = 'Parameters'
                 ) -> dict:
  """get_model fields of the model (of any family) that `params` fit, from their shapes.

  `source` starts the error messages ('Checkpoint PATH').
  """
  return _family_of_tree(params, source).architecture(params, source)


def _kind(arch: Mapping[str, Any]) -> str:
  return families.of_config(arch).kind(arch)


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
  return diff + families.of_config(arch).misfits(cfg, arch, ignore_heads)


def fitting_presets(arch: Mapping[str, Any], ignore_heads: bool = False) -> list[str]:
  """Presets whose architecture `arch` matches (heads ignored on request)."""
  return [name for name in models.MODEL_CONFIGS
          if not _fit(name, arch, ignore_heads)]


def describe(arch: Mapping[str, Any]) -> str:
  """A short description of an architecture, for error messages."""
  return families.of_config(arch).describe(arch)


def differences(got: Mapping[str, Any], want: Mapping[str, Any]) -> list[str]:
  """Where architecture `got` (a checkpoint's) differs from `want`, as 'width 32 vs 96'."""
  if _kind(got) != _kind(want):
    return [f'{_kind(got)} vs {_kind(want)}']
  pairs = families.of_config(got).size_pairs(got, want)
  pairs['patch'] = tuple('x'.join(map(str, a['patches']['size'])) for a in (got, want))
  return [f'{name} {a} vs {b}' for name, (a, b) in pairs.items() if a != b]


def tree_differences(params: Mapping[str, Any], model_params: Mapping[str, Any]
                     ) -> Optional[tuple[dict, dict, list[str]]]:
  """(a checkpoint's architecture, the model's, differences()) from their trees.

  None where these sizes cannot describe one of the trees (the parameter check names that
  misfit).
  """
  try:
    got, want = architecture(params), architecture(model_params)
  except ValueError:
    return None
  return got, want, differences(got, want)


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
  family = families.of_config(arch)
  free = family.checkpoint_fields(params, arch, options)
  if model is not None:
    preset = resolve_model(model)
    check_fit(path, preset, arch)
    return Checkpoint(params, preset, free, fmt, path)
  fits = fitting_presets(arch)
  if fits:
    return Checkpoint(params, _closest(fits, free), free, fmt, path)
  # No preset: the family's base preset with every architecture field set.
  base = family.base_preset(arch)
  overrides = {**family.preset_overrides(arch), **free}
  logging.info('Checkpoint %s fits no preset; using %s with overrides %s', path, base,
               overrides)
  return Checkpoint(params, base, overrides, fmt, path)
