"""Model families: one class per kind of model, asked by every other part of the package.

A family is the Flax module class plus what the trainer, FLOP counter, checkpoint
formats, `predict` and `visualize` need to know about it. It is the one place that reads
its parameter tree for the others: prefix-token counts, embed/encode (the masked
objectives), the architecture a tree implies (`fields_from_params`) and the fitting of a
checkpoint's position embedding (`adapt_posemb`). A preset names its family (its
'family' key); mappings without one (a built model's fields) are recognised by
`signature`. To add a family, subclass `Family` beside its module and call
`register(MyFamily(), presets)`; nothing else branches on the kind of model. ViT (with its
ResNet hybrids, vit_jax/models/vit/) and MLP-Mixer are registered in
`vit_jax/models/__init__.py`.
"""
import dataclasses
import math
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

import flax.linen as nn
import ml_collections
import numpy as np

Params = Mapping[str, Any]

# config.model's "not set": the preset's value (or the module's default).
UNSET = None
# The preset key naming its family (not a module field).
FAMILY_KEY = 'family'


class Family:
  """What the package knows about one kind of model; each family subclasses it.

  Class attributes describe the tree; methods compute from a model, its fields or its
  parameters. A capability a family lacks is None (`embed`, `encode`, `adapt_posemb`,
  `layer_of`, `attention_fields`): callers test for it.
  """
  name: str = ''
  module: type = nn.Module
  # Preset keys that only this family's configs have: how a config without a
  # 'family' key (module fields, a user's mapping) is recognised.
  signature: tuple[str, ...] = ()
  # config.model knobs the module takes beyond its preset fields, with their config
  # default (UNSET: the preset's value; else the module gets the value).
  options: Mapping[str, Any] = MappingProxyType({'num_classes': UNSET, 'dtype': 'auto'})
  # The config field type of each UNSET option (its typed placeholder in config.model).
  option_types: Mapping[str, type] = MappingProxyType({'num_classes': int})
  # Preset fields holding a dict whose keys get_model also takes as overrides
  # (get_model('ViT-B_16', num_layers=6) sets transformer.num_layers).
  nested: tuple[str, ...] = ()
  # Where the learned position embedding lives (None: the family has none, so its
  # resolution is fixed by its parameters).
  posemb_path: Optional[tuple[str, ...]] = None
  # The prefix tokens' parameters, in token order (dropped / started fresh when only
  # one side of a checkpoint and a model has them).
  prefix_keys: tuple[str, ...] = ()
  # The classifier head first, then layers a fine-tuning head may replace (pre-logits).
  head_keys: tuple[str, ...] = ('head', 'pre_logits')
  # Classifier heads that fine-tuning starts fresh and feature extraction drops.
  fresh_keys: tuple[str, ...] = ('head',)
  # Where the last norm may sit: a checkpoint with one fine-tunes a model with another,
  # the model's own starting fresh (ViT: on the tokens, or after pooling as fc_norm).
  final_norm_keys: tuple[str, ...] = ()
  # Linen name -> published name of the children of modules whose name matches the key
  # (regex), for the published .npz layout.
  npz_renames: Mapping[str, Mapping[str, str]] = MappingProxyType({})
  # The conversions (checkpoint formats of other libraries, formats/registry.py) it
  # speaks; containers such as npz hold every family's tree.
  formats: tuple[str, ...] = ()
  # Records softmax attention weights (sow 'intermediates') when run with these fields.
  attention_fields: Optional[Mapping[str, Any]] = None
  # (model, params, images, *, add_posemb=True, posemb=None) -> (prefix tokens,
  # patch tokens), and (model, params, tokens, *, train, rngs, add_posemb=False) ->
  # encoded tokens: what masked objectives build on. None: the family has no tokens.
  embed: Optional[Callable[..., Any]] = None
  encode: Optional[Callable[..., Any]] = None
  # (model fields, checkpoint tree, posemb, init posemb, grid, pretrained grid) ->
  # the checkpoint's position embedding fitted to the model (None: no posemb).
  adapt_posemb: Optional[Callable[..., Any]] = None
  # Depth of a parameter (its key path) for layer-wise learning-rate decay: 0 for the
  # embeddings, i + 1 for block i, None for what sits on top of the blocks. None here:
  # the family has no such layers (layer_decay is refused).
  layer_of: Optional[Callable[[tuple[str, ...]], Optional[int]]] = None

  def config_section(self) -> dict[str, Any]:
    """config.model's entries for the options: their defaults, typed placeholders for UNSET."""
    return {k: (ml_collections.config_dict.placeholder(self.option_types[k])
                if v is UNSET else v) for k, v in self.options.items()}

  def forward_flops(self, fields: Mapping[str, Any], res: int, num_classes: int) -> float:
    """Analytic forward FLOPs (2 per multiply-add) of a preset config or a module's fields."""
    raise NotImplementedError(f'{type(self).__name__}.forward_flops')

  def width(self, fields: Mapping[str, Any]) -> int:
    """Feature width before the head (the size of a pre-logits layer)."""
    raise NotImplementedError(f'{type(self).__name__}.width')

  def patch_tokens(self, model: nn.Module, params: Params) -> Optional[int]:
    """Patch tokens a parameter tree was trained on, or None when it does not fix them."""
    del model, params
    return None

  def fields_from_params(self, params: Params) -> dict:
    """Architecture fields a parameter tree fixes beyond the head."""
    del params
    return {}

  def prefix_tokens(self, model: Any) -> int:
    """Tokens before the patch tokens of a model or its fields (class, registers, ...)."""
    del model
    return 0

  def class_token(self, model: Any) -> bool:
    """Whether the first prefix token is a class token (attention maps read its row)."""
    del model
    return False

  def posemb_prefix_tokens(self, model: Any) -> int:
    """How many of the prefix tokens the position embedding covers."""
    del model
    return 0

  def rgb_filters(self, model: nn.Module, params: Params) -> Any:
    """The patch-embedding kernel on RGB pixels [ph, pw, 3, D], or None (hybrids)."""
    del model, params
    return None

  # What the checkpoint formats ask about a tree of this family (formats/arch.py).

  def owns(self, params: Params) -> bool:
    """Whether a parameter tree is one of this family's."""
    del params
    return False

  def kind(self, fields: Mapping[str, Any]) -> str:
    """The kind of model within the family ('vit' or 'hybrid'; else the family's name)."""
    del fields
    return self.name

  def architecture(self, params: Params, source: str) -> dict:
    """get_model fields of the model a tree of this family fits, read off its shapes."""
    raise ValueError(f'{source}: the {self.name} family reads no checkpoints.')

  def misfits(self, cfg: Mapping[str, Any], arch: Mapping[str, Any],
              ignore_heads: bool) -> list[str]:
    """Where architecture `arch` differs from the preset `cfg` (patch size aside)."""
    del ignore_heads
    return [f'{k} {arch[k]} != {cfg[k]}' for k in self.signature if cfg[k] != arch[k]]

  def describe(self, arch: Mapping[str, Any]) -> str:
    """A short description of an architecture, for error messages."""
    return f'a {self.name} model with ' + ', '.join(f'{k} {arch[k]}' for k in self.signature)

  def size_pairs(self, got: Mapping[str, Any], want: Mapping[str, Any]) -> dict[str, tuple]:
    """{size name: (got's, want's)} of two architectures (patch size aside)."""
    return {k: (got[k], want[k]) for k in self.signature}

  def checkpoint_fields(self, params: Params, arch: Mapping[str, Any],
                        options: Optional[Mapping[str, Any]]) -> dict:
    """get_model fields a checkpoint fixes beyond its preset (the head; the options)."""
    del params, options
    return {'num_classes': arch['num_classes']}

  def base_preset(self, arch: Mapping[str, Any]) -> str:
    """The preset a tree that fits none is built from, every architecture field overridden."""
    del arch
    return next(name for name, cfg in MODEL_CONFIGS.items()
                if cfg.get(FAMILY_KEY) == self.name)

  def preset_overrides(self, arch: Mapping[str, Any]) -> dict:
    """get_model overrides that set every field of `arch` on `base_preset`."""
    return dict(arch)


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


def config_section() -> dict[str, Any]:
  """The config.model section: every registered family's options (the first family's
  default where two declare one)."""
  section = {}
  for family in FAMILIES.values():
    for key, value in family.config_section().items():
      section.setdefault(key, value)
  return section


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


def shape_at(tree: Params, *path: str) -> Optional[tuple]:
  """The shape of tree[path[0]][path[1]]..., or None where a key is missing."""
  node = get_path(tree, path)
  return None if node is None else tuple(np.shape(node))


def square_grid(tokens: int, what: str) -> tuple[int, int]:
  """(side, side) of `tokens` patch tokens, or a one-line error if they are not square."""
  side = math.isqrt(max(tokens, 0))
  if side * side != tokens or side == 0:
    raise ValueError(f'{what} holds {tokens} patch tokens, not a square grid.')
  return side, side
