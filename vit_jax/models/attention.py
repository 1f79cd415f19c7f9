"""Multi-head self-attention with a switchable kernel and the original parameter tree."""
import functools
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import fp8

IMPLEMENTATIONS = ('xla', 'cudnn', 'auto')


def _split_heads_init(base_init, num_heads: int, head_dim: int, axis: int):
  """Initialises a (.., heads, head_dim, ..) kernel as if it were a flat matrix."""

  def init(key, shape, dtype=jnp.float32):
    flat = list(shape)
    flat[axis:axis + 2] = [num_heads * head_dim]
    return base_init(key, tuple(flat), dtype).reshape(shape)

  return init


def _cudnn_supported(dtype: Any, head_dim: int) -> bool:
  """Whether cuDNN flash attention can run this dtype and head size here."""
  half = jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
  return (half and jax.default_backend() == 'gpu' and head_dim % 8 == 0
          and head_dim <= 128)


def resolve_implementation(implementation: str, dtype: Any,
                           head_dim: int = 64) -> str:
  """Picks the concrete attention kernel for 'auto'; checks 'cudnn' can run."""
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f'Unknown attention implementation {implementation!r}; '
                     f'use one of {IMPLEMENTATIONS}.')
  supported = _cudnn_supported(dtype, head_dim)
  if implementation == 'auto':
    return 'cudnn' if supported else 'xla'
  if implementation == 'cudnn' and not supported:
    raise ValueError(
        f"attention='cudnn' needs a GPU, a bfloat16/float16 compute dtype and "
        f'a head size that is a multiple of 8 up to 128 (have backend='
        f'{jax.default_backend()}, dtype={jnp.dtype(dtype).name}, head size '
        f"{head_dim}); use attention='auto' or 'xla'.")
  return implementation


def padded_length(tokens: int, pad_multiple: int) -> int:
  """Token count cuDNN runs on: a multiple of `pad_multiple`, and even.

  cuDNN's training kernels reject odd sequence lengths (jax 0.11), so an odd
  multiple is doubled.
  """
  if not isinstance(pad_multiple, int) or pad_multiple < 1:
    raise ValueError(f'attention pad multiple must be an int >= 1, got '
                     f'{pad_multiple!r}.')
  multiple = pad_multiple if pad_multiple % 2 == 0 else 2 * pad_multiple
  return -(-tokens // multiple) * multiple


def _cudnn_attention(q, k, v, valid: int):
  """cuDNN fused attention over the first `valid` keys of the (padded) sequence."""
  if valid == q.shape[1]:
    return jax.nn.dot_product_attention(q, k, v, implementation='cudnn')
  lengths = jnp.full((q.shape[0],), valid, dtype=jnp.int32)
  return jax.nn.dot_product_attention(
      q, k, v, key_value_seq_lengths=lengths, implementation='cudnn')


class _Projection(nn.Module):
  """Holds one projection's kernel and bias under the published names."""
  kernel_shape: tuple
  bias_shape: tuple
  kernel_init: Any
  use_bias: bool = True

  @nn.compact
  def __call__(self) -> tuple:
    kernel = self.param('kernel', self.kernel_init, self.kernel_shape)
    if not self.use_bias:  # timm qkv_bias=False: zeros that are no parameter
      return kernel, jnp.zeros(self.bias_shape, kernel.dtype)
    bias = self.param('bias', nn.initializers.zeros, self.bias_shape)
    return kernel, bias


class MultiHeadDotProductAttention(nn.Module):
  """Self-attention whose parameters match flax's MultiHeadDotProductAttention.

  Query, key and value projections are fused into one matmul at compute time
  (`fused_qkv`, or three with fused_qkv=False); the stored parameters keep the
  separate query/key/value/out layout either way. Options as
  timm's Attention: `qkv_bias=False` drops the query/key/value biases (out keeps
  its own), `qk_norm` adds a LayerNorm over each head's query and key
  (`query_norm`, `key_norm`, of width head_dim). Given `kv`, the queries come from
  `x` and keys/values from `kv` (cross-attention, e.g. a MAP head's probe); that
  path runs in XLA and records no weights.
  """
  num_heads: int
  dtype: Any = jnp.float32
  dropout_rate: float = 0.0
  deterministic: bool = True
  implementation: str = 'xla'
  # cuDNN pads the token axis to a multiple of this (made even).
  pad_multiple: int = 8
  # Set when the caller already padded the tokens: only the first
  # `valid_tokens` are attended to, and nothing is padded here.
  valid_tokens: Optional[int] = None
  qkv_bias: bool = True
  qk_norm: bool = False
  epsilon: float = 1e-6
  matmul: str = 'default'  # 'fp8', 'fp8_delayed': float8 projections (models/fp8.py)
  # True: one matmul for query, key and value (then split); False: three matmuls whose
  # outputs are already in the layout attention reads (no transpose, no slice copies).
  fused_qkv: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, kv: Optional[jax.Array] = None) -> jax.Array:
    features = x.shape[-1]
    if features % self.num_heads:
      raise ValueError(f'Hidden size {features} is not divisible by '
                       f'num_heads={self.num_heads}.')
    heads, head_dim = self.num_heads, features // self.num_heads
    xavier = nn.initializers.xavier_uniform()
    in_init = _split_heads_init(xavier, heads, head_dim, axis=1)
    out_init = _split_heads_init(xavier, heads, head_dim, axis=0)
    qkv_params = [
        _Projection((features, heads, head_dim), (heads, head_dim), in_init,
                    use_bias=self.qkv_bias, name=name)()
        for name in ('query', 'key', 'value')
    ]
    w_qkv = jnp.stack([w for w, _ in qkv_params], axis=1).astype(self.dtype)
    b_qkv = jnp.stack([b for _, b in qkv_params], axis=0).astype(self.dtype)
    dot = functools.partial(fp8.module_dot_general, self, self.matmul)
    if kv is None and self.fused_qkv:
      qkv = jnp.einsum('bsd,dthk->tbshk', x.astype(self.dtype), w_qkv,
                       _dot_general=dot('qkv'))
      qkv = qkv + b_qkv[:, None, None]
      q, k, v = qkv[0], qkv[1], qkv[2]
    elif kv is None:  # each in the [batch, tokens, heads, head_dim] layout attention reads
      q, k, v = (jnp.einsum('bsd,dhk->bshk', x.astype(self.dtype), w.astype(self.dtype),
                            _dot_general=dot(name)) + b.astype(self.dtype)
                 for name, (w, b) in zip(('query', 'key', 'value'), qkv_params))
    else:
      q = jnp.einsum('bsd,dhk->bshk', x.astype(self.dtype), w_qkv[:, 0]) + b_qkv[0]
      kv_ = jnp.einsum('bsd,dthk->tbshk', kv.astype(self.dtype), w_qkv[:, 1:])
      kv_ = kv_ + b_qkv[1:, None, None]
      k, v = kv_[0], kv_[1]
    if self.qk_norm:  # timm's q_norm / k_norm: per head, over head_dim
      q = nn.LayerNorm(epsilon=self.epsilon, dtype=self.dtype, name='query_norm')(q)
      k = nn.LayerNorm(epsilon=self.epsilon, dtype=self.dtype, name='key_norm')(k)

    impl = resolve_implementation(self.implementation, self.dtype, head_dim)
    if (self.dropout_rate > 0 and not self.deterministic) or kv is not None:
      impl = 'xla'  # the fused kernels have no attention dropout
    seq = q.shape[1]
    valid = k.shape[1] if self.valid_tokens is None else self.valid_tokens
    if impl == 'cudnn' and self.valid_tokens is None:
      padded = padded_length(seq, self.pad_multiple)
      pad = [(0, 0), (0, padded - seq), (0, 0), (0, 0)]
      q, k, v = (jnp.pad(t, pad) for t in (q, k, v))
      out = _cudnn_attention(q, k, v, valid)[:, :seq]
    elif impl == 'cudnn':
      out = _cudnn_attention(q, k, v, valid)
    else:
      out = self._xla_attention(q, k, v, head_dim, valid, record=kv is None)

    w_out, b_out = _Projection((heads, head_dim, features), (features,),
                               out_init, name='out')()
    y = jnp.einsum('bshk,hkd->bsd', out, w_out.astype(self.dtype), _dot_general=dot('out'))
    return y + b_out.astype(self.dtype)

  def _xla_attention(self, q, k, v, head_dim: int, valid: int,
                     record: bool = True) -> jax.Array:
    """Plain softmax attention; records the weights for visualisation."""
    logits = jnp.einsum('bqhk,bshk->bhqs', q, k) / jnp.sqrt(
        jnp.asarray(head_dim, q.dtype))
    logits = logits.astype(jnp.float32)
    if valid != k.shape[1]:
      logits = jnp.where(jnp.arange(k.shape[1]) < valid, logits, -1e30)
    weights = jax.nn.softmax(logits, axis=-1)
    if record:  # self-attention only: the figures stack them by depth
      self.sow('intermediates', 'attention_weights', weights)
    weights = weights.astype(self.dtype)
    if self.dropout_rate > 0 and not self.deterministic:
      weights = nn.Dropout(self.dropout_rate)(weights, deterministic=False)
    return jnp.einsum('bhqs,bshk->bqhk', weights, v)
