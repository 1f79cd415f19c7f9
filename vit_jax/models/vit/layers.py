"""The ViT family's layers, and its norms and activations looked up by name.

`NORMS` and `ACTIVATIONS` are the registries the `norm` and `activation` options name
(timm resolves norm_layer / act_layer by name once in the same way): RMSNorm would be the
line `'rms_norm': nn.RMSNorm` below, and a test may add its own.
"""
import functools
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import attention as attention_lib
from vit_jax.models import fp8
from vit_jax.models import mlp_kernel

PATCH_EMBEDDINGS = ('matmul', 'conv')
# Rematerialisation: 'full' saves only each block's input; 'dots' also keeps
# the outputs of the weight matmuls, recomputing attention and elementwise ops.
POLICY_FNS = {
    'full': jax.checkpoint_policies.nothing_saveable,
    'dots': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}
REMAT_POLICIES = ('none',) + tuple(POLICY_FNS)

# name -> a Flax norm class taking (epsilon=, dtype=, name=).
NORMS: dict[str, Callable[..., nn.Module]] = {
    'layer_norm': nn.LayerNorm,
}
# name -> the MLP non-linearity.
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    'gelu_tanh': functools.partial(nn.gelu, approximate=True),  # as published
    'gelu': functools.partial(nn.gelu, approximate=False),      # timm's, transformers'
    'quick_gelu': lambda x: x * jax.nn.sigmoid(1.702 * x),      # CLIP's
}
# name -> the gate's non-linearity of a gated MLP: act(gate(x)) * value(x) -> out.
GATED_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    'swiglu': nn.silu,  # timm SwiGLU / EVA02 / DINOv2-g
}


def activation_names() -> tuple[str, ...]:
  """Every name the `activation` option takes (plain, then gated)."""
  return tuple(ACTIVATIONS) + tuple(GATED_ACTIVATIONS)


def norm(kind: str, epsilon: float, dtype: Any, name: str) -> nn.Module:
  """The norm `kind` (a NORMS name) as a child module `name`."""
  return NORMS[kind](epsilon=epsilon, dtype=dtype, name=name)


def activate(x: jax.Array, activation: str) -> jax.Array:
  """The MLP non-linearity `activation` (not a gated one, which needs two projections)."""
  if activation not in ACTIVATIONS:
    raise ValueError(f'Unknown activation {activation!r}; use one of '
                     f'{activation_names()}.')
  return ACTIVATIONS[activation](x)


def remat_policy(remat: Any) -> str:
  """Normalises the `remat` field (bool or policy name) to a policy name."""
  # The command line gives the string field 'True'/'False' (the original repo's bool).
  if remat is False or remat is None or str(remat).lower() == 'false':
    return 'none'
  if remat is True or str(remat).lower() == 'true':
    return 'full'
  if remat not in REMAT_POLICIES:
    raise ValueError(f'Unknown remat {remat!r}; use a bool or one of '
                     f'{REMAT_POLICIES}.')
  return remat


class PatchEmbedding(nn.Module):
  """Non-overlapping patches projected to `features`, as nn.Conv's parameters.

  'matmul' cuts the patches with a reshape and runs one matmul; 'conv' runs a
  strided convolution. Both keep the (ph, pw, in, out) kernel and the bias.
  """
  features: int
  patch: tuple
  dtype: Any = jnp.float32
  method: str = 'conv'
  use_bias: bool = True   # timm drops it when pre_norm (CLIP)

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    if self.method not in PATCH_EMBEDDINGS:
      raise ValueError(f'Unknown patch_embedding {self.method!r}; use one of '
                       f'{PATCH_EMBEDDINGS}.')
    ph, pw = self.patch
    n, h, w, c = x.shape
    kernel = self.param('kernel', nn.initializers.lecun_normal(),
                        (ph, pw, c, self.features)).astype(self.dtype)
    x = x.astype(self.dtype)
    if self.method == 'conv':
      y = jax.lax.conv_general_dilated(
          x, kernel, (ph, pw), 'VALID',
          dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
    else:
      x = x.reshape(n, h // ph, ph, w // pw, pw, c).transpose(0, 1, 3, 2, 4, 5)
      y = x.reshape(n, h // ph, w // pw, ph * pw * c) @ kernel.reshape(
          ph * pw * c, self.features)
    if not self.use_bias:
      return y
    bias = self.param('bias', nn.initializers.zeros, (self.features,))
    return y + bias.astype(self.dtype)


class AddPositionEmbs(nn.Module):
  """Adds a learned position embedding of shape (1, tokens, width)."""
  posemb_init: Any = nn.initializers.normal(stddev=0.02)

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    pe = self.param('pos_embedding', self.posemb_init, (1,) + x.shape[1:])
    if pe.shape[1:] != x.shape[1:]:
      raise ValueError(
          f'Position embedding has shape {pe.shape} but the input has '
          f'{x.shape[1]} tokens of width {x.shape[2]}; interpolate it with '
          'vit_jax.checkpoint.load_pretrained for a new resolution.')
    return x + pe.astype(x.dtype)


# The MLP's initializers (both of its paths create the same parameters).
MLP_KERNEL_INIT = nn.initializers.xavier_uniform()
MLP_BIAS_INIT = nn.initializers.normal(stddev=1e-6)


class MlpBlock(nn.Module):
  """Dense -> activation -> Dropout -> (norm) -> Dense -> Dropout.

  With a gated activation ('swiglu', timm SwiGLU / EVA02): silu(gate(x)) * value(x) ->
  Dropout -> (norm `norm`) -> `out`, each projection `mlp_dim` wide.
  """
  mlp_dim: int
  dtype: Any = jnp.float32
  out_dim: Optional[int] = None
  dropout_rate: float = 0.1
  deterministic: bool = True
  activation: str = 'gelu_tanh'
  # The norm (a NORMS name) before the output projection (timm scale_mlp_norm), or None.
  norm: Optional[str] = None
  epsilon: float = 1e-6
  matmul: str = 'default'  # 'fp8', 'fp8_delayed': float8 projections (models/fp8.py)
  # 'pallas': bias + activation and their gradients inside the matmuls (mlp_kernel.py).
  kernel: str = 'xla'
  kernel_blocks: str = ''  # its tiles (mlp_kernel.parse_blocks; '': the default)

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    out_dim = x.shape[-1] if self.out_dim is None else self.out_dim
    if self.kernel == 'pallas':
      return self._fused(x, out_dim)
    dense = lambda n, name=None: nn.Dense(  # noqa: E731
        n, dtype=self.dtype, kernel_init=MLP_KERNEL_INIT, bias_init=MLP_BIAS_INIT, name=name,
        dot_general=fp8.module_dot_general(self, self.matmul, name))
    if self.activation in GATED_ACTIVATIONS:
      gate = GATED_ACTIVATIONS[self.activation]
      x = gate(dense(self.mlp_dim, 'gate')(x)) * dense(self.mlp_dim, 'value')(x)
      last = 'out'
    else:
      x = activate(dense(self.mlp_dim, 'Dense_0')(x), self.activation)
      last = 'Dense_1'
    x = nn.Dropout(self.dropout_rate)(x, deterministic=self.deterministic)
    if self.norm:
      x = norm(self.norm, self.epsilon, self.dtype, 'norm')(x)
    x = dense(out_dim, last)(x)
    return nn.Dropout(self.dropout_rate)(x, deterministic=self.deterministic)

  def _fused(self, x: jax.Array, out_dim: int) -> jax.Array:
    """The plain MLP as mlp_kernel.mlp, on the same Dense_0 / Dense_1 parameters."""
    check_fused_mlp(self.activation, self.norm is not None, self.matmul)
    if not self.deterministic and self.dropout_rate > 0:
      raise ValueError(f'mlp_kernel=pallas has no dropout inside the MLP; train with '
                       f'dropout_rate=0 (not {self.dropout_rate}) or mlp_kernel=xla.')
    dtype = self.dtype or x.dtype
    w1, b1 = DenseParams(self.mlp_dim, name='Dense_0')(x.shape[-1])
    w2, b2 = DenseParams(out_dim, name='Dense_1')(self.mlp_dim)
    cast = lambda t: t.astype(dtype)  # noqa: E731
    flat = x.reshape(-1, x.shape[-1])
    y = mlp_kernel.mlp(cast(flat), cast(w1), cast(b1), cast(w2), cast(b2), self.activation,
                       mlp_kernel.parse_blocks(self.kernel_blocks))
    y = y.reshape(x.shape[:-1] + (out_dim,))
    return nn.Dropout(self.dropout_rate)(y, deterministic=self.deterministic)


class DenseParams(nn.Module):
  """nn.Dense's kernel and bias (the MLP's initializers) without its product."""
  features: int

  @nn.compact
  def __call__(self, in_features: int) -> tuple[jax.Array, jax.Array]:
    kernel = self.param('kernel', MLP_KERNEL_INIT, (in_features, self.features), jnp.float32)
    bias = self.param('bias', MLP_BIAS_INIT, (self.features,), jnp.float32)
    return kernel, bias


def check_fused_mlp(activation: str, mlp_norm: bool, matmul: str) -> None:
  """One-line ValueError for a block mlp_kernel=pallas cannot run."""
  if activation not in mlp_kernel.ACTIVATIONS:
    raise ValueError(f'mlp_kernel=pallas runs activation {", ".join(mlp_kernel.ACTIVATIONS)}, '
                     f'not {activation!r}; use mlp_kernel=xla.')
  if mlp_norm or matmul != 'default':
    raise ValueError('mlp_kernel=pallas runs the plain bf16/f32 MLP: use it without '
                     'mlp_norm and with matmul=default, or mlp_kernel=xla.')


class LayerScale(nn.Module):
  """Multiplies each channel by a learned `scale` (DeiT-III / DINOv2), initialised to init_value."""
  init_value: float

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    scale = self.param('scale', nn.initializers.constant(self.init_value),
                       (x.shape[-1],))
    return x * scale.astype(x.dtype)


class MAPHead(nn.Module):
  """Multihead attention pooling (big_vision / SigLIP; timm global_pool='map').

  A learned `probe` attends to the tokens; then x + MLP(norm(x)).
  """
  num_heads: int
  mlp_dim: int
  dtype: Any = jnp.float32
  activation: str = 'gelu_tanh'
  norm: str = 'layer_norm'
  epsilon: float = 1e-6

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    n, _, d = x.shape
    probe = self.param('probe', nn.initializers.xavier_uniform(), (1, 1, d))
    probe = jnp.broadcast_to(probe.astype(self.dtype), (n, 1, d))
    x = attention_lib.MultiHeadDotProductAttention(
        num_heads=self.num_heads, dtype=self.dtype,
        name='MultiHeadDotProductAttention_0')(probe, kv=x)
    y = norm(self.norm, self.epsilon, self.dtype, 'LayerNorm_0')(x)
    x = x + MlpBlock(mlp_dim=self.mlp_dim, dtype=self.dtype, dropout_rate=0.0,
                     activation=self.activation, epsilon=self.epsilon,
                     name='MlpBlock_0')(y)
    return x[:, 0]


def drop_path(module: nn.Module, x: jax.Array, rate: Any,
              deterministic: bool) -> jax.Array:
  """Stochastic depth: zeroes a residual branch per example, rescaling the rest.

  `rate` is a Python float, or a traced scalar when the layers run under scan.
  """
  if deterministic or (isinstance(rate, (int, float)) and rate == 0.0):
    return x
  keep = 1.0 - jnp.asarray(rate, jnp.float32)
  mask = jax.random.bernoulli(module.make_rng('dropout'), keep,
                              (x.shape[0],) + (1,) * (x.ndim - 1))
  return jnp.where(mask, x / keep.astype(x.dtype), jnp.zeros_like(x))

