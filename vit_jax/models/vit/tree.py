"""What a ViT parameter tree says, and the family's functions that read or fit one.

The tree knowledge of the family: the options a tree fixes (`fields_from_params`), its
prefix tokens ([class?, distillation?, registers...] as one count and one layout), the
patch tokens it was trained on, the position embedding fitted to another model
(`adapt_posemb`), the layer of a parameter (layer-wise learning-rate decay), and
embed / encode (what masked objectives build on).
"""
import math
import re
from typing import Any, Mapping, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.models import families
from vit_jax.models import posemb as posemb_lib
from vit_jax.models.vit import model as model_lib

POSEMB_PATH = ('Transformer', 'posembed_input', 'pos_embedding')
PREFIX_KEYS = model_lib.PREFIX_KEYS
# What sits on top of the blocks (no layer for layer decay).
TOP_KEYS = ('head', 'head_dist', 'pre_logits', 'fc_norm', 'MAPHead_0')

_get = model_lib.field_of
num_prefix_tokens = model_lib.num_prefix_tokens
posemb_prefix_tokens = model_lib.posemb_prefix_tokens
has_class_token = model_lib.has_class_token


def patch_tokens(model: nn.Module, params: Mapping[str, Any]) -> Optional[int]:
  """Patch tokens the tree's position embedding was trained on (None: no embedding)."""
  posemb = families.get_path(params, POSEMB_PATH)
  if posemb is None:
    return None
  return int(posemb.shape[1]) - posemb_prefix_tokens(model)


def _is_square(n: int) -> bool:
  return n > 0 and math.isqrt(n) ** 2 == n


def prefix_layout_of_params(params: Mapping[str, Any]) -> list[tuple[str, int]]:
  """[(parameter key, tokens)] of the prefix tokens a parameter tree holds, in order."""
  return [(k, int(params[k].shape[1])) for k in PREFIX_KEYS if k in params]


def prefix_tokens_of_params(params: Mapping[str, Any]) -> int:
  """Prefix tokens a parameter tree holds (class, distillation, registers)."""
  return sum(count for _, count in prefix_layout_of_params(params))


def no_embed_class_of_params(params: Mapping[str, Any],
                             grid: Optional[Sequence[int]] = None) -> bool:
  """Whether a tree's position embedding skips its prefix tokens, from the shapes.

  Without `grid` the patch grid is taken to be square: the embedding that
  leaves a square once the prefix tokens are counted out (or not) decides.
  """
  posemb = families.get_path(params, POSEMB_PATH)
  prefix = prefix_tokens_of_params(params)
  if posemb is None or not prefix:
    return False
  length = int(posemb.shape[1])
  if grid is not None:
    return length == int(grid[0]) * int(grid[1])
  return _is_square(length) and not _is_square(length - prefix)


def fields_from_params(params: Mapping[str, Any]) -> dict:
  """The options a ViT parameter tree fixes (vit_jax/models/vit/options.py)."""
  kernel = families.get_path(params, ('pre_logits', 'kernel'))
  block = families.get_path(params, ('Transformer', 'encoderblock_0')) or {}
  attn = block.get('MultiHeadDotProductAttention_0', {})
  mlp = block.get('MlpBlock_0', {})
  registers = families.get_path(params, ('registers',))
  fields = {
      'representation_size': None if kernel is None else int(kernel.shape[-1]),
      'fc_norm': 'fc_norm' in params,
      'distilled': 'dist_token' in params,
      'num_registers': 0 if registers is None else int(registers.shape[1]),
      'qk_norm': 'query_norm' in attn,
      'pre_norm': 'pre_norm' in params.get('Transformer', {}),
      'mlp_norm': 'norm' in mlp,
      'no_embed_class': no_embed_class_of_params(params),
  }
  if block and 'bias' not in attn.get('query', {'bias': 0}):
    fields['qkv_bias'] = False
  if 'LayerScale_0' in block:
    # The trained scales are in the tree; the init value (DINOv2's) only seeds training.
    fields['layer_scale'] = 1e-5
  else:
    fields['layer_scale'] = None
  if 'gate' in mlp:
    fields['activation'] = 'swiglu'
  if 'MAPHead_0' in params:
    fields['classifier'] = 'map'
  return fields


def embed(model: model_lib.VisionTransformer, params: Mapping[str, Any],
          images: jax.Array, *,
          add_posemb: bool = True, posemb: Optional[jax.Array] = None
          ) -> tuple[jax.Array, jax.Array]:
  """(prefix tokens [n, P, D], patch tokens [n, h * w, D]) of a pixel ViT's images.

  With `add_posemb` each gets its position embedding (the tree's, or `posemb`
  of the same shape, e.g. MAE's fixed sin-cos table); prefix tokens get none
  with no_embed_class.
  """
  if model.resnet is not None:
    raise ValueError(f'{model.model_name or "This hybrid"} embeds ResNet features; '
                     'embedding pixels needs a ViT whose patches are pixels.')
  x = model_lib.patch_embedding(model).apply({'params': params['embedding']}, images)
  n, h, w, d = x.shape
  x = x.reshape(n, h * w, d)
  prefix = [jnp.broadcast_to(params[k].astype(x.dtype), (n, c, d))
            for k, c in model_lib.prefix_layout(model)]
  prefix = jnp.concatenate(prefix, axis=1) if prefix else jnp.zeros((n, 0, d), x.dtype)
  if not add_posemb:
    return prefix, x
  pe = families.get_path(params, POSEMB_PATH) if posemb is None else posemb
  pe = jnp.asarray(pe).astype(x.dtype)
  lead = posemb_prefix_tokens(model)
  if pe.shape[1] != lead + h * w:
    raise ValueError(f'Position embedding has {pe.shape[1]} tokens but the images give '
                     f'{lead} prefix + {h}x{w} patch tokens; interpolate it with '
                     'vit_jax.checkpoint.load_pretrained for a new resolution.')
  if lead:  # with no_embed_class the prefix tokens have no position
    prefix = prefix + pe[:, :lead]
  return prefix, x + pe[:, lead:]


def encode(model: model_lib.VisionTransformer, params: Mapping[str, Any],
           tokens: jax.Array, *,
           train: bool = False, rngs: Optional[Mapping[str, jax.Array]] = None,
           add_posemb: bool = False) -> jax.Array:
  """The blocks (after pre_norm) and the final norm on [prefix + patch] tokens.

  `add_posemb` adds the tree's position embedding (and its dropout) first, as
  the model does; else the tokens come from `embed` with theirs.
  """
  return model_lib.encoder(model, add_position_embedding=add_posemb).apply(
      {'params': params['Transformer']}, tokens, train=train, rngs=dict(rngs or {}))


def adapt_posemb(fields: Any, checkpoint: Mapping[str, Any], posemb: np.ndarray,
                 init_posemb: np.ndarray, grid: Optional[Sequence[int]] = None,
                 pretrained_grid: Optional[Sequence[int]] = None) -> np.ndarray:
  """A checkpoint's position embedding fitted to the model of `fields` (its init's shape).

  Rows of the prefix tokens both have are kept, those only the model has come
  from `init_posemb`, and the patch grid is resized (e.g. DINOv2's 37x37 at 518
  px to 16x16 at 224 px); `checkpoint` (its tree) tells which prefix tokens its
  embedding covers.
  """
  old = ([] if no_embed_class_of_params(checkpoint, pretrained_grid)
         else prefix_layout_of_params(checkpoint))
  new = [] if _get(fields, 'no_embed_class') else model_lib.prefix_layout(fields)
  old_rows, at = {}, 0
  for key, count in old:
    old_rows[key] = posemb[:, at:at + count]
    at += count
  rows, new_at = [], 0
  for key, count in new:
    same = key in old_rows and old_rows[key].shape[1] == count
    rows.append(old_rows[key] if same else init_posemb[:, new_at:new_at + count])
    new_at += count
  new_grid = tuple(grid) if grid is not None else families.square_grid(
      init_posemb.shape[1] - new_at, 'The new model\'s position embedding')
  if new_grid[0] * new_grid[1] + new_at != init_posemb.shape[1]:
    raise ValueError(f'grid={tuple(new_grid)} does not match the model\'s '
                     f'{init_posemb.shape[1]} position embeddings.')
  patches = posemb_lib.interpolate_posemb(posemb[:, at:], new_grid, 0,
                                          old_grid=pretrained_grid)
  return np.concatenate(rows + [patches], axis=1).astype(init_posemb.dtype)


def rgb_filters(model: nn.Module, params: Mapping[str, Any]) -> Any:
  # A hybrid embeds ResNet features, not RGB pixels.
  return None if model.resnet is not None else params['embedding']['kernel']


def layer_of(path: tuple[str, ...]) -> Optional[int]:
  """0: patch/ResNet embedding, class token, position embedding; i + 1: encoderblock_i."""
  if path[0] in TOP_KEYS:
    return None
  if path[0] != 'Transformer':
    return 0
  if path[1] == 'posembed_input':
    return 0
  block = re.fullmatch(r'encoderblock_(\d+)', path[1])
  return int(block.group(1)) + 1 if block else None  # encoder_norm: on top
