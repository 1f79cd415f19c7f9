"""Analytic forward FLOPs of a ViT (and its ResNet hybrid): matmuls and convolutions only.

The convention (2 per multiply-add, 3x forward for training) is vit_jax/models/flops.py's.
"""
from typing import Any, Mapping

from vit_jax.models import resnet
from vit_jax.models.vit import layers
from vit_jax.models.vit import model as model_lib

_get = model_lib.field_of


def transformer_flops(tokens: int, width: int, mlp_dim: int, depth: int,
                      mlp_matmuls: int = 2) -> float:
  """Matmul FLOPs of `depth` pre-norm blocks on `tokens` tokens of `width`.

  `mlp_matmuls` is 3 for SwiGLU (gate, value and output projections).
  """
  n, d = tokens, width
  per_layer = (2.0 * n * d * 3 * d      # fused QKV projection
               + 2 * 2.0 * n * n * d    # q.k^T and attention-weighted v
               + 2.0 * n * d * d        # output projection
               + mlp_matmuls * 2.0 * n * d * mlp_dim)  # the MLP matmuls
  return depth * per_layer


def map_head_flops(tokens: int, width: int, mlp_dim: int) -> float:
  """Matmul FLOPs of a MAP head: one probe attending to `tokens` tokens, then its MLP."""
  d = width
  return (2.0 * d * d                  # probe query projection
          + 2.0 * tokens * d * 2 * d   # key and value projections
          + 2 * 2.0 * tokens * d       # the probe's attention products
          + 2.0 * d * d                # output projection
          + 2 * 2.0 * d * mlp_dim)     # its MLP


def forward_flops(c: Mapping[str, Any], res: int, num_classes: int) -> float:
  """Matmul/conv FLOPs of one forward pass of a ViT or hybrid at `res` pixels."""
  d = c['hidden_size']
  t = c['transformer']
  mlp, depth = _get(t, 'mlp_dim'), _get(t, 'num_layers')
  patch = tuple(_get(c['patches'], 'size'))[0]
  flops, side, channels = 0.0, res, 3
  resnet_cfg = c.get('resnet')
  if resnet_cfg:
    flops, side, channels = resnet.forward_flops(
        res, tuple(_get(resnet_cfg, 'num_layers')),
        _get(resnet_cfg, 'width_factor', 1))
  grid = side // patch
  patches = grid * grid
  flops += 2.0 * patches * patch * patch * channels * d
  classifier = _get(c, 'classifier', 'token')
  n = patches + model_lib.num_prefix_tokens(c)
  gated = _get(c, 'activation') in layers.GATED_ACTIVATIONS
  flops += transformer_flops(n, d, mlp, depth, mlp_matmuls=3 if gated else 2)
  if classifier == 'map':
    flops += map_head_flops(patches, d, mlp)
  rows = n if classifier in ('unpooled', 'token_unpooled') else 1
  width = d
  rep = _get(c, 'representation_size')
  if rep:
    flops += 2.0 * rows * d * rep
    width = rep
  if num_classes:
    heads = 2 if _get(c, 'distilled') else 1  # DeiT's distillation head
    flops += heads * 2.0 * rows * width * num_classes
  return flops


