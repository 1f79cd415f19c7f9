"""Fitting a loaded checkpoint to a model for fine-tuning: new head, resized position embeddings.

`load_pretrained` is the original vit_jax function of that name: the checkpoint's
parameters go into the tree of freshly initialised ones, the head (and a pre-logits layer
of another width) comes from the fresh tree, and learned position embeddings are
fitted to the new model by its family (around all prefix tokens, to the new patch
grid). What a family calls its head, prefix tokens and position embedding comes from its
record (vit_jax.models.families).
"""
from typing import Any, Mapping, Optional, Sequence

from absl import logging
import numpy as np

from vit_jax.models import families
from vit_jax.models import formats
from vit_jax.models import naming
from vit_jax.models.formats import hub
from vit_jax.models.formats import npz
from vit_jax.models.posemb import interpolate_posemb

__all__ = ['load_pretrained', 'interpolate_posemb']

Params = dict[str, Any]


# ----------------------------------------------------------------------------
# Fine-tuning.


def _summary(keys: Sequence[str], limit: int = 6) -> str:
  keys = sorted(keys)
  more = f' (+{len(keys) - limit} more)' if len(keys) > limit else ''
  return ', '.join(keys[:limit]) + more


def _check_architecture(tree: Mapping[str, Any], init_params: Mapping[str, Any],
                        path: str) -> None:
  """One line naming where another model's checkpoint differs (width, layers, ...)."""
  found = formats.tree_differences(tree, init_params)
  if found is None:
    return
  got, want, diff = found
  # A class token only one side has is fine-tuned anew, as the head is.
  diff = [d for d in diff if not d.startswith('class token')]
  if diff:
    raise ValueError(f'Checkpoint {path} is a {naming.describe(got)}, the model a '
                     f'{naming.describe(want)} ({", ".join(diff[:3])}); set '
                     '--config.model_name (and --config.model.*) to what it was trained as.')


def load_pretrained(*,
                    pretrained_path: str,
                    init_params: Mapping[str, Any],
                    model_config: Any,
                    grid: Optional[Sequence[int]] = None,
                    pretrained_grid: Optional[Sequence[int]] = None,
                    strict: bool = True) -> Params:
  """Loads a checkpoint into the tree of `init_params` for fine-tuning.

  `pretrained_path` is an .npz, a timm state dict (.safetensors/.pth/.bin; the
  heads come from model_config), a transformers ViT directory or a hub name
  (hf-hub:ORG/NAME[@REVISION], resolved through huggingface_hub's cache).
  The head comes from `init_params`; the checkpoint's `pre_logits` is dropped
  when the new model has none and kept when its width matches (else taken
  from `init_params`, as when the checkpoint lacks it). Position embeddings are
  interpolated to the new grid (`grid` for non-square new grids,
  `pretrained_grid` for non-square checkpoint grids). Other shape mismatches
  raise a one-line ValueError; with `strict`, so do parameters the checkpoint
  lacks or the model does not have (beyond head, pre-logits, class token), else
  they are logged. Returns a nested dict of numpy arrays shaped like `init_params`.
  """
  family = families.of_config(model_config)
  transformer = model_config.get('transformer') or {}
  pretrained_path = hub.resolve(pretrained_path)
  tree = formats.read_params(pretrained_path, num_heads=transformer.get('num_heads'))
  if strict:  # strict=False is the API's way to load another depth on purpose
    _check_architecture(tree, init_params, pretrained_path)
  restored = npz.flatten(tree)
  init = {k: np.asarray(v) for k, v in npz.flatten(init_params).items()}
  name = model_config.get('model_name') or 'the model'
  # Prefix tokens (class, distillation, registers) only one side has: the model's
  # start fresh, the checkpoint's are dropped.
  prefix_keys = set(family.prefix_keys)
  posemb_key = '/'.join(family.posemb_path or ())
  head_prefixes = tuple(k + '/' for k in family.head_keys)
  fresh_prefixes = tuple(k + '/' for k in family.fresh_keys)

  norm_prefixes = tuple(k + '/' for k in family.final_norm_keys)
  where = lambda keys: {p for p in norm_prefixes  # noqa: E731
                        if any(k.startswith(p) for k in keys)}
  # The final norm moved (encoder_norm <-> fc_norm): the model's starts fresh, as a head.
  norm_moved = bool(where(restored)) and bool(where(init)) and where(restored) != where(init)

  def is_head(key: str) -> bool:
    return (key.startswith(head_prefixes + fresh_prefixes) or
            (norm_moved and key.startswith(norm_prefixes)))

  unexpected = [k for k in restored if k not in init]
  missing = [k for k in init if k not in restored]
  hard_unexpected = [k for k in unexpected if not is_head(k) and k not in prefix_keys]
  hard_missing = [k for k in missing if not is_head(k) and k not in prefix_keys]
  if unexpected:
    logging.info('load_pretrained: dropping %d checkpoint parameters the model '
                 'does not have: %s', len(unexpected), _summary(unexpected))
  if missing:
    logging.warning('load_pretrained: %d parameters not in %s, kept from '
                    'init_params: %s', len(missing), pretrained_path,
                    _summary(missing))
  if strict and (hard_unexpected or hard_missing):
    parts = []
    if hard_missing:
      parts.append(f'lacks {len(hard_missing)} parameters of {name} '
                   f'({_summary(hard_missing)})')
    if hard_unexpected:
      parts.append(f'has {len(hard_unexpected)} parameters {name} does not '
                   f'({_summary(hard_unexpected)})')
    raise ValueError(f'Checkpoint {pretrained_path} does not fit {name}: '
                     f'{"; ".join(parts)}. Pick the matching model_name or pass '
                     'strict=False.')

  params, mismatched = {}, []
  for key, init_value in sorted(init.items()):
    if key.startswith(fresh_prefixes) or key not in restored:
      params[key] = init_value
      continue
    value = restored[key]
    if is_head(key) and value.shape != init_value.shape:
      # A new representation_size is a deliberate choice: start that layer anew.
      logging.warning('load_pretrained: %s is %s in the checkpoint but %s in '
                      'the model; kept from init_params', key, value.shape,
                      init_value.shape)
      params[key] = init_value
      continue
    if (key == posemb_key and family.adapt_posemb is not None and
        value.shape != init_value.shape and value.shape[-1] == init_value.shape[-1]):
      logging.info('load_pretrained: resized position embeddings %s -> %s',
                   value.shape, init_value.shape)
      value = family.adapt_posemb(model_config, tree, value, init_value, grid,
                                  pretrained_grid)
    if value.shape != init_value.shape:
      mismatched.append((key, value.shape, init_value.shape))
      continue
    params[key] = value.astype(init_value.dtype, copy=False)
  if mismatched:
    key, got, want = mismatched[0]
    more = (f' (and {len(mismatched) - 1} more mismatched keys)'
            if len(mismatched) > 1 else '')
    raise ValueError(f'Checkpoint {pretrained_path} key {key!r} has shape {got} '
                     f'but {name} expects {want}{more}; check model_name and '
                     'its overrides.')
  return npz.unflatten(params, pretrained_path)
