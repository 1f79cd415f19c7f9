"""Model families: one record per kind of model, asked by every other part of the package.

A family is the Flax module class plus what the trainer, FLOP counter, checkpoint
formats, `predict` and `visualize` need to know about it. It is the one place that reads
its parameter tree for the others: prefix-token counts, embed/encode (the masked
objectives), the architecture a tree implies (`fields_from_params`) and the fitting of a
checkpoint's position embedding (`adapt_posemb`). A preset names its family (its
'family' key); mappings without one (a built model's fields) are recognised by
`signature`. To add a family, write its
module and call `register(Family(...), presets)`; nothing else branches on the kind of
model. ViT (with its ResNet hybrids) and MLP-Mixer are registered in
`vit_jax/models/__init__.py`.
"""
import dataclasses
import math
from typing import Any, Callable, Mapping, Optional

import flax.linen as nn
import ml_collections

Params = Mapping[str, Any]

# config.model values meaning "keep the preset's value".
KEEP = -1
# The preset key naming its family (not a module field).
FAMILY_KEY = 'family'


@dataclasses.dataclass(frozen=True)
class Family:
  """What the package knows about one kind of model."""
  name: str
  module: type
  # Preset keys that only this family's configs have: how a config without a
  # 'family' key (module fields, a user's mapping) is recognised.
  signature: tuple[str, ...]
  # config.model knobs the module takes beyond its preset fields, with the value
  # that means "not set" (KEEP: the preset's value; else the module gets it).
  options: Mapping[str, Any]
  # Analytic forward FLOPs (2 per multiply-add) of (architecture fields, resolution,
  # num_classes); the fields are a preset config or a built module's attributes.
  forward_flops: Callable[[Mapping[str, Any], int, int], float]
  # Feature width before the head (the size of a pre-logits layer).
  width: Callable[[Mapping[str, Any]], int]
  # Patch tokens a parameter tree was trained on, or None when the tree does not fix them.
  patch_tokens: Callable[[nn.Module, Params], Optional[int]]
  # Architecture fields a parameter tree fixes beyond the head (e.g. pre-logits width).
  fields_from_params: Callable[[Params], dict] = lambda params: {}
  # Preset fields holding a dict whose keys get_model also takes as overrides
  # (get_model('ViT-B_16', num_layers=6) sets transformer.num_layers).
  nested: tuple[str, ...] = ()
  # Where the learned position embedding lives (None: the family has none, so its
  # resolution is fixed by its parameters).
  posemb_path: Optional[tuple[str, ...]] = None
  class_token: Callable[[nn.Module], bool] = lambda model: False
  # The class token's parameter (dropped when a checkpoint meets a model without one).
  class_token_key: Optional[str] = None
  # The patch-embedding kernel on RGB pixels [ph, pw, 3, D], or None (hybrids).
  rgb_filters: Callable[[nn.Module, Params], Any] = lambda model, params: None
  # Records softmax attention weights (sow 'intermediates') when run with these fields.
  attention_fields: Optional[Mapping[str, Any]] = None
  # Linen name -> published name of the children of modules whose name matches the key
  # (regex), for the published .npz layout.
  npz_renames: Mapping[str, Mapping[str, str]] = dataclasses.field(
      default_factory=dict)
  # The classifier head first, then layers a fine-tuning head may replace (pre-logits).
  head_keys: tuple[str, ...] = ('head', 'pre_logits')
  # Where the last norm may sit: a checkpoint with one fine-tunes a model with another,
  # the model's own starting fresh (ViT: on the tokens, or after pooling as fc_norm).
  final_norm_keys: tuple[str, ...] = ()
  # Depth of a parameter (its key path) for layer-wise learning-rate decay: 0 for the
  # embeddings, i + 1 for block i, None for what sits on top of the blocks (final norm,
  # pre-logits, head). None here: the family has no such layers (layer_decay is refused).
  layer_of: Optional[Callable[[tuple[str, ...]], Optional[int]]] = None
  # Tokens before the patch tokens (class, distillation, registers) of a model or its
  # fields, and how many of them the position embedding covers.
  prefix_tokens: Callable[[Any], int] = lambda model: 0
  posemb_prefix_tokens: Callable[[Any], int] = lambda model: 0
  # The prefix tokens' parameters (dropped / started fresh when only one side has them).
  prefix_keys: tuple[str, ...] = ()
  # (model, params, images, *, add_posemb=True, posemb=None) -> (prefix tokens,
  # patch tokens), and (model, params, tokens, *, train, rngs, add_posemb=False) ->
  # encoded tokens: what masked objectives build on. None: the family has no tokens.
  embed: Optional[Callable[..., Any]] = None
  encode: Optional[Callable[..., Any]] = None
  # (model fields, checkpoint tree, posemb, init posemb, grid, pretrained grid) ->
  # the checkpoint's position embedding fitted to the model (None: no posemb).
  adapt_posemb: Optional[Callable[..., Any]] = None
  # Classifier heads that fine-tuning starts fresh and feature extraction drops.
  fresh_keys: tuple[str, ...] = ('head',)


FAMILIES: dict[str, Family] = {}
MODEL_CONFIGS: dict[str, ml_collections.ConfigDict] = {}


def register(family: Family,
             presets: Mapping[str, ml_collections.ConfigDict]) -> None:
  """Adds a family and its named presets (errors on a name that is taken)."""
  if family.name in FAMILIES:
    raise ValueError(f'Model family {family.name!r} is already registered.')
  taken = sorted(set(presets) & set(MODEL_CONFIGS))
  if taken:
    raise ValueError(f'Model presets {taken} are already registered.')
  for name, cfg in presets.items():
    if cfg.get(FAMILY_KEY, family.name) != family.name:
      raise ValueError(f'Preset {name!r} names family {cfg.get(FAMILY_KEY)!r}, not '
                       f'{family.name!r}.')
    if not all(k in cfg for k in family.signature):
      raise ValueError(f'Preset {name!r} lacks the keys {family.signature} of '
                       f'family {family.name!r}.')
  FAMILIES[family.name] = family
  MODEL_CONFIGS.update(presets)


def of_config(config: Mapping[str, Any]) -> Family:
  """The family of a preset config (its 'family' key) or any mapping of fields."""
  named = config.get(FAMILY_KEY) if hasattr(config, 'get') else None
  if named is not None:
    if named not in FAMILIES:
      raise ValueError(f'Unknown model family {named!r}; known families: '
                       f'{", ".join(FAMILIES)}.')
    return FAMILIES[named]
  for family in FAMILIES.values():
    if all(k in config for k in family.signature):
      return family
  raise ValueError(f'No model family recognises a config with keys {sorted(config)}; '
                   f'known families: {", ".join(FAMILIES)}.')


def of_module(model: nn.Module) -> Family:
  """The family of a built model (its own class first, then a base class's)."""
  for family in FAMILIES.values():
    if type(model) is family.module:
      return family
  for family in FAMILIES.values():
    if isinstance(model, family.module):
      return family
  raise ValueError(f'{type(model).__name__} is not the module of a registered model '
                   f'family ({", ".join(FAMILIES)}).')


def fields(model: nn.Module) -> dict[str, Any]:
  """The architecture fields of a built model (its dataclass attributes)."""
  return {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
          if f.name not in ('parent', 'name')}


def get_path(tree: Params, path: tuple[str, ...]) -> Optional[Any]:
  """tree[path[0]][path[1]]..., or None where a key is missing."""
  for key in path:
    if not isinstance(tree, Mapping) or key not in tree:
      return None
    tree = tree[key]
  return tree


def square_grid(tokens: int, what: str) -> tuple[int, int]:
  """(side, side) of `tokens` patch tokens, or a one-line error if they are not square."""
  side = math.isqrt(max(tokens, 0))
  if side * side != tokens or side == 0:
    raise ValueError(f'{what} holds {tokens} patch tokens, not a square grid.')
  return side, side
