"""Vision Transformer (and its ResNet hybrid) with the original Linen parameter tree.

One `VisionTransformer` covers the ViTs trained today as options, as timm's
VisionTransformer constructor flags do (timm's name in brackets). Every default is
the published ViT: its parameter tree and logits do not change. Options reach a
training config as `config.model.<option>` (vit_jax/configs/base.py) and
`get_model(name, <option>=...)`; an unknown value is a one-line ValueError.

Tokens are [class?, distillation?, registers..., patches] (prefix tokens first;
`num_prefix_tokens(model)` counts them, as timm's `num_prefix_tokens`).

Option (default)            What it does; parameters it adds
  classifier ('token')      pooling: 'token' (class token), 'gap' (mean of the patch
                            tokens, prefix tokens excluded: timm 'avg'), 'map' (timm
                            'map': big_vision's MAP head on the patch tokens),
                            'unpooled', 'token_unpooled' (all tokens). 'map' adds
                            MAPHead_0/{probe [1, 1, D],
                            MultiHeadDotProductAttention_0/{query,key,value,out},
                            LayerNorm_0, MlpBlock_0/{Dense_0, Dense_1}}.
  class_token (None)        [class_token] None: the classifier decides (token kinds:
                            yes, others: no); True/False explicitly, e.g. gap pooling
                            over patches with a class token present (MAE). Adds
                            cls [1, 1, D].
  num_registers (0)         [reg_tokens] register tokens: registers [1, R, D].
  distilled (False)         DeiT's distillation token and second head: dist_token
                            [1, 1, D], head_dist (Dense). Logits are the mean of the
                            two heads (timm at inference); without heads, the mean of
                            the two tokens. Needs classifier='token'.
  no_embed_class (False)    [no_embed_class] the position embedding covers the patch
                            tokens only (DeiT-III, DINOv2 reg4); prefix tokens get
                            none. Transformer/posembed_input/pos_embedding is then
                            [1, h * w, D] instead of [1, prefix + h * w, D].
  layer_scale (None)        [init_values] per-channel residual scales, initialised to
                            the value (DINOv2 1e-5, DeiT-III 1e-6):
                            encoderblock_i/LayerScale_0/scale (attention branch) and
                            LayerScale_1/scale (MLP branch), each [D].
  qk_norm (False)           [qk_norm] LayerNorm over each head's query and key:
                            MultiHeadDotProductAttention_0/{query_norm,key_norm}/
                            {scale,bias} [head_dim].
  pre_norm (False)          [pre_norm] CLIP's LayerNorm after the position embedding,
                            before the blocks: Transformer/pre_norm/{scale,bias}. As in
                            timm, the patch embedding then has no bias
                            (embedding/bias absent).
  activation ('gelu_tanh')  [act_layer / mlp_layer] 'gelu_tanh' (as published),
                            'gelu' (exact erf GELU, timm's and transformers' default),
                            'quick_gelu' (x * sigmoid(1.702 x), CLIP), 'swiglu'
                            (timm SwiGLU / EVA02 / DINOv2-g: silu(gate(x)) * value(x)
                            -> out). transformer.mlp_dim is SwiGLU's hidden width; its
                            MlpBlock_0 holds gate, value and out (Dense) instead of
                            Dense_0/Dense_1.
  mlp_norm (False)          [scale_mlp_norm] LayerNorm before the MLP's output
                            projection (EVA02): MlpBlock_0/norm/{scale,bias}.
  qkv_bias (True)           [qkv_bias] False: query/key/value have no bias (out keeps
                            its own).
  layer_norm_epsilon (1e-6) [norm_layer eps] of every LayerNorm (CLIP 1e-5).
  fc_norm (False)           [fc_norm] LayerNorm after pooling instead of on the
                            tokens: fc_norm/{scale,bias}, no Transformer/encoder_norm.
  matmul ('default')        'fp8': the blocks' query/key/value, out and MLP projections
                            in float8 with per-tensor scales (e4m3 forward, e5m2
                            gradients; vit_jax/models/fp8.py), for Hopper GPUs. Same
                            parameters; the patch embedding and head stay in dtype.
  fused_qkv (True)          query, key and value as one matmul, then split; False: three
                            matmuls, each already in the layout attention reads. Same
                            function and parameters (a speed lever; README, Performance).
  patches.size              any (ph, pw), e.g. 14; images and grids may be non-square
                            (the position embedding is created for the h x w grid).

The family record (FAMILY, vit_jax.models.families) is the one place that reads this
tree for others: prefix-token counts, embed/encode (the masked objectives), the
options a tree implies (`fields_from_params`), and position-embedding resizing.
"""
import math
import re
from typing import Any, Mapping, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.models import attention as attention_lib
from vit_jax.models import families
from vit_jax.models import fp8
from vit_jax.models import posemb as posemb_lib
from vit_jax.models import resnet

CLASSIFIERS = ('token', 'gap', 'map', 'unpooled', 'token_unpooled')
ACTIVATIONS = ('gelu_tanh', 'gelu', 'quick_gelu', 'swiglu')
_TOKEN_CLASSIFIERS = ('token', 'token_unpooled')
PATCH_EMBEDDINGS = ('matmul', 'conv')
# Rematerialisation: 'full' saves only each block's input; 'dots' also keeps
# the outputs of the weight matmuls, recomputing attention and elementwise ops.
_POLICY_FNS = {
    'full': jax.checkpoint_policies.nothing_saveable,
    'dots': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}
REMAT_POLICIES = ('none',) + tuple(_POLICY_FNS)


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


def activate(x: jax.Array, activation: str) -> jax.Array:
  """The MLP non-linearity `activation` (not swiglu, which gates two projections)."""
  if activation == 'gelu_tanh':
    return nn.gelu(x, approximate=True)
  if activation == 'gelu':
    return nn.gelu(x, approximate=False)
  if activation == 'quick_gelu':  # CLIP's: x * sigmoid(1.702 x)
    return x * jax.nn.sigmoid(1.702 * x)
  raise ValueError(f'Unknown activation {activation!r}; use one of {ACTIVATIONS}.')


class MlpBlock(nn.Module):
  """Dense -> activation -> Dropout -> (LayerNorm) -> Dense -> Dropout.

  With activation='swiglu' (timm SwiGLU / EVA02): silu(gate(x)) * value(x) ->
  Dropout -> (LayerNorm `norm`) -> `out`, each projection `mlp_dim` wide.
  """
  mlp_dim: int
  dtype: Any = jnp.float32
  out_dim: Optional[int] = None
  dropout_rate: float = 0.1
  deterministic: bool = True
  activation: str = 'gelu_tanh'
  norm: bool = False       # timm scale_mlp_norm: LayerNorm before the output projection
  epsilon: float = 1e-6
  matmul: str = 'default'  # 'fp8': float8 projections (vit_jax/models/fp8.py)

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    out_dim = x.shape[-1] if self.out_dim is None else self.out_dim
    dense = lambda n, name=None: nn.Dense(  # noqa: E731
        n, dtype=self.dtype, kernel_init=nn.initializers.xavier_uniform(),
        bias_init=nn.initializers.normal(stddev=1e-6), name=name,
        dot_general=fp8.dot_general(self.matmul))
    if self.activation == 'swiglu':
      x = nn.silu(dense(self.mlp_dim, 'gate')(x)) * dense(self.mlp_dim, 'value')(x)
      last = 'out'
    else:
      x = activate(dense(self.mlp_dim, 'Dense_0')(x), self.activation)
      last = 'Dense_1'
    x = nn.Dropout(self.dropout_rate)(x, deterministic=self.deterministic)
    if self.norm:
      x = nn.LayerNorm(epsilon=self.epsilon, dtype=self.dtype, name='norm')(x)
    x = dense(out_dim, last)(x)
    return nn.Dropout(self.dropout_rate)(x, deterministic=self.deterministic)


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

  A learned `probe` attends to the tokens; then x + MLP(LayerNorm(x)).
  """
  num_heads: int
  mlp_dim: int
  dtype: Any = jnp.float32
  activation: str = 'gelu_tanh'
  epsilon: float = 1e-6

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    n, _, d = x.shape
    probe = self.param('probe', nn.initializers.xavier_uniform(), (1, 1, d))
    probe = jnp.broadcast_to(probe.astype(self.dtype), (n, 1, d))
    x = attention_lib.MultiHeadDotProductAttention(
        num_heads=self.num_heads, dtype=self.dtype,
        name='MultiHeadDotProductAttention_0')(probe, kv=x)
    y = nn.LayerNorm(epsilon=self.epsilon, dtype=self.dtype, name='LayerNorm_0')(x)
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


class Encoder1DBlock(nn.Module):
  """Pre-LayerNorm transformer block: x + attn(LN(x)), then x + mlp(LN(x))."""
  mlp_dim: int
  num_heads: int
  dtype: Any = jnp.float32
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  stochastic_depth: float = 0.0
  deterministic: bool = True
  attention: str = 'xla'
  attention_pad_multiple: int = 8
  valid_tokens: Optional[int] = None
  activation: str = 'gelu_tanh'
  mlp_norm: bool = False
  layer_scale: Optional[float] = None
  qk_norm: bool = False
  qkv_bias: bool = True
  layer_norm_epsilon: float = 1e-6
  matmul: str = 'default'
  fused_qkv: bool = True

  @nn.compact
  def __call__(self, inputs: jax.Array, drop_rate: Any = None) -> jax.Array:
    """Applies the block; `drop_rate` (scan) overrides `stochastic_depth`."""
    rate = self.stochastic_depth if drop_rate is None else drop_rate
    norm = lambda name: nn.LayerNorm(  # noqa: E731
        epsilon=self.layer_norm_epsilon, dtype=self.dtype, name=name)
    x = norm('LayerNorm_0')(inputs)
    x = attention_lib.MultiHeadDotProductAttention(
        num_heads=self.num_heads, dtype=self.dtype,
        dropout_rate=self.attention_dropout_rate,
        deterministic=self.deterministic, implementation=self.attention,
        pad_multiple=self.attention_pad_multiple,
        valid_tokens=self.valid_tokens, qkv_bias=self.qkv_bias,
        qk_norm=self.qk_norm, epsilon=self.layer_norm_epsilon,
        matmul=self.matmul, fused_qkv=self.fused_qkv,
        name='MultiHeadDotProductAttention_0')(x)
    x = nn.Dropout(self.dropout_rate)(x, deterministic=self.deterministic)
    if self.layer_scale:
      x = LayerScale(self.layer_scale, name='LayerScale_0')(x)
    x = self.residual(inputs, drop_path(self, x, rate, self.deterministic))
    y = norm('LayerNorm_1')(x)
    y = MlpBlock(mlp_dim=self.mlp_dim, dtype=self.dtype,
                 dropout_rate=self.dropout_rate,
                 deterministic=self.deterministic, activation=self.activation,
                 norm=self.mlp_norm, epsilon=self.layer_norm_epsilon,
                 matmul=self.matmul, name='MlpBlock_0')(y)
    if self.layer_scale:
      y = LayerScale(self.layer_scale, name='LayerScale_1')(y)
    return self.residual(x, drop_path(self, y, rate, self.deterministic))

  def residual(self, x: jax.Array, branch: jax.Array) -> jax.Array:
    """Adds a branch to the residual stream (the hook a block subclass may change)."""
    return x + branch


class Encoder(nn.Module):
  """Position embedding, `num_layers` blocks and the final LayerNorm.

  When the attention runs on cuDNN the tokens are padded once here (to an
  even multiple of `attention_pad_multiple`) and sliced back after the final
  norm, so no block pads or slices; padded keys are masked.
  With `scan_layers` the blocks run under one lax.scan over parameters stacked
  at compute time, so the stored tree keeps its encoderblock_{i} entries while
  the compiled program holds a single block (much faster to compile for L/H).
  """
  num_layers: int
  mlp_dim: int
  num_heads: int
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  add_position_embedding: bool = True
  dtype: Any = jnp.float32
  attention: str = 'xla'
  attention_pad_multiple: int = 8
  remat: Any = False
  scan_layers: bool = False
  stochastic_depth: float = 0.0
  final_norm: bool = True  # False: the model normalises after pooling (fc_norm)
  # Leading tokens (class, distillation, registers); with no_embed_class the
  # position embedding covers only the patch tokens after them.
  num_prefix_tokens: int = 0
  no_embed_class: bool = False
  pre_norm: bool = False   # CLIP's LayerNorm before the blocks: pre_norm
  activation: str = 'gelu_tanh'
  mlp_norm: bool = False
  layer_scale: Optional[float] = None
  qk_norm: bool = False
  qkv_bias: bool = True
  layer_norm_epsilon: float = 1e-6
  matmul: str = 'default'
  fused_qkv: bool = True
  # The block class and the extra fields it takes (a model's `block` / `block_fields`).
  block: Any = Encoder1DBlock
  block_fields: Any = ()

  def _block_kwargs(self, train: bool, valid: Optional[int]) -> dict:
    return dict(mlp_dim=self.mlp_dim, num_heads=self.num_heads,
                dtype=self.dtype, dropout_rate=self.dropout_rate,
                attention_dropout_rate=self.attention_dropout_rate,
                deterministic=not train, attention=self.attention,
                attention_pad_multiple=self.attention_pad_multiple,
                valid_tokens=valid, activation=self.activation,
                mlp_norm=self.mlp_norm, layer_scale=self.layer_scale,
                qk_norm=self.qk_norm, qkv_bias=self.qkv_bias,
                layer_norm_epsilon=self.layer_norm_epsilon, matmul=self.matmul,
                fused_qkv=self.fused_qkv, **dict(self.block_fields))

  def _pads_once(self, width: int, train: bool) -> bool:
    """Whether every block's attention will run on cuDNN (then pad here)."""
    impl = attention_lib.resolve_implementation(
        self.attention, self.dtype, width // self.num_heads)
    return impl == 'cudnn' and not (train and self.attention_dropout_rate > 0)

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
    policy = remat_policy(self.remat)
    if self.add_position_embedding:
      if self.no_embed_class:
        lead = self.num_prefix_tokens
        x = jnp.concatenate(
            [x[:, :lead], AddPositionEmbs(name='posembed_input')(x[:, lead:])], axis=1)
      else:
        x = AddPositionEmbs(name='posembed_input')(x)
      x = nn.Dropout(self.dropout_rate)(x, deterministic=not train)
    if self.pre_norm:
      x = nn.LayerNorm(epsilon=self.layer_norm_epsilon, dtype=self.dtype,
                       name='pre_norm')(x)
    # Stochastic depth grows linearly with depth, 0 at the first block.
    rates = [self.stochastic_depth * i / max(self.num_layers - 1, 1)
             for i in range(self.num_layers)]
    tokens, valid = x.shape[1], None
    if self._pads_once(x.shape[-1], train):
      padded = attention_lib.padded_length(tokens, self.attention_pad_multiple)
      x = jnp.pad(x, [(0, 0), (0, padded - tokens), (0, 0)])
      valid = tokens
    if self.scan_layers and not self.is_initializing():
      x = self._scan_blocks(x, rates, policy, train, valid)
    else:
      block_cls = self.block
      if policy != 'none':
        block_cls = nn.remat(self.block, policy=_POLICY_FNS[policy])
      for i, rate in enumerate(rates):
        x = block_cls(stochastic_depth=rate, name=f'encoderblock_{i}',
                      **self._block_kwargs(train, valid))(x)
    if self.final_norm:
      x = nn.LayerNorm(epsilon=self.layer_norm_epsilon, dtype=self.dtype,
                       name='encoder_norm')(x)
    return x[:, :tokens]

  def _scan_blocks(self, x: jax.Array, rates: list, policy: str,
                   train: bool, valid: Optional[int]) -> jax.Array:
    """Runs the blocks under lax.scan over their stacked parameters."""
    params = self.variables['params']
    stacked = jax.tree.map(
        lambda *leaves: jnp.stack(leaves),
        *[params[f'encoderblock_{i}'] for i in range(self.num_layers)])
    block = self.block(parent=None, **self._block_kwargs(train, valid))
    random = train and (self.dropout_rate > 0 or self.stochastic_depth > 0 or
                        self.attention_dropout_rate > 0)
    keys = (jax.random.split(self.make_rng('dropout'), self.num_layers)
            if random else None)
    drop = jnp.asarray(rates, jnp.float32) if self.stochastic_depth else None

    def body(carry, layer):
      p, key, rate = layer
      rngs = {'dropout': key} if key is not None else {}
      return block.apply({'params': p}, carry, rate, rngs=rngs), None

    if policy != 'none':
      body = jax.checkpoint(body, policy=_POLICY_FNS[policy], prevent_cse=False)
    x, _ = jax.lax.scan(body, x, (stacked, keys, drop))
    return x


class VisionTransformer(nn.Module):
  """ViT: patch embedding (optionally of a ResNet's features) + Transformer + head.

  Takes NHWC images in [-1, 1]; returns float32 logits (or features when
  num_classes is None/0 or the classifier is unpooled). The variant options
  (class_token ... layer_norm_epsilon) are described in the module docstring.
  """
  num_classes: Optional[int]
  patches: Any
  transformer: Any
  hidden_size: int
  resnet: Optional[Any] = None
  representation_size: Optional[int] = None
  classifier: str = 'token'
  head_bias_init: float = 0.0
  model_name: Optional[str] = None
  dtype: Any = jnp.float32
  attention: str = 'xla'
  attention_pad_multiple: int = 8
  remat: Any = False            # bool, or a policy name from REMAT_POLICIES
  scan_layers: bool = False
  # 'conv' measured 14% faster than 'matmul' for ViT-B/16 training on an H100.
  patch_embedding: str = 'conv'
  stochastic_depth: float = 0.0
  # LayerNorm after pooling instead of on every token before it: timm's fc_norm,
  # the head of MAE / BEiT fine-tuning (params['fc_norm'], no encoder_norm).
  fc_norm: bool = False
  # The variants (timm VisionTransformer flags); the defaults are the published ViT.
  class_token: Optional[bool] = None   # None: as the classifier implies
  num_registers: int = 0
  distilled: bool = False
  no_embed_class: bool = False
  layer_scale: Optional[float] = None  # init value; None or 0: no layer scale
  qk_norm: bool = False
  pre_norm: bool = False
  activation: str = 'gelu_tanh'
  mlp_norm: bool = False
  qkv_bias: bool = True
  layer_norm_epsilon: float = 1e-6
  # 'fp8': the blocks' projections in float8 (Hopper GPUs; vit_jax/models/fp8.py).
  matmul: str = 'default'
  fused_qkv: bool = True  # False: query, key and value as three matmuls (same tree)

  # The encoder block class, and the model fields it takes beyond the Encoder's: where
  # a new per-block option goes (a field here, one on the block, one entry below).
  block = Encoder1DBlock

  def block_fields(self) -> tuple:
    """(name, value) pairs of model fields the block takes beyond the Encoder's."""
    return ()

  def __post_init__(self):
    super().__post_init__()
    check_options(self)

  @nn.compact
  def __call__(self, inputs: jax.Array, *, train: bool = False) -> jax.Array:
    if inputs.ndim != 4:
      raise ValueError(f'Expected NHWC images, got shape {inputs.shape}.')
    prefix, x = self._embed_tokens(inputs)
    x = encoder(self, name='Transformer')(jnp.concatenate(prefix + [x], axis=1),
                                          train=train)
    return self._head(x)

  def _embed_tokens(self, inputs: jax.Array) -> tuple[list, jax.Array]:
    """(prefix tokens [n, 1 or R, D] each, patch tokens [n, h * w, D]), no posemb."""
    x = inputs.astype(self.dtype)
    if self.resnet is not None:
      x = resnet.apply_resnet(x, tuple(self.resnet['num_layers']),
                              self.resnet['width_factor'], self.dtype)
    patch = tuple(self.patches['size'])
    if x.shape[1] % patch[0] or x.shape[2] % patch[1]:
      raise ValueError(f'Image/feature size {x.shape[1:3]} is not divisible '
                       f'by the patch size {patch}.')
    x = patch_embedding(self, name='embedding')(x)
    n, h, w, c = x.shape
    x = jnp.reshape(x, (n, h * w, c))
    tile = lambda t: jnp.tile(t.astype(x.dtype), (n, 1, 1))  # noqa: E731
    prefix = []
    if has_class_token(self):
      prefix.append(tile(self.param('cls', nn.initializers.zeros, (1, 1, c))))
    if self.distilled:
      prefix.append(tile(self.param('dist_token', nn.initializers.normal(0.02),
                                    (1, 1, c))))
    if self.num_registers:
      prefix.append(tile(self.param('registers', nn.initializers.normal(1e-6),
                                    (1, self.num_registers, c))))
    return prefix, x

  def _head(self, x: jax.Array) -> jax.Array:
    """Pooling, fc_norm, pre-logits and head(s) on the encoder's output tokens."""
    lead = num_prefix_tokens(self)
    dist = None
    if self.classifier == 'token':
      x, dist = x[:, 0], (x[:, 1] if self.distilled else None)
    elif self.classifier == 'gap':
      x = jnp.mean(x[:, lead:], axis=1)
    elif self.classifier == 'map':
      t = dict(self.transformer)
      x = MAPHead(num_heads=t['num_heads'], mlp_dim=t['mlp_dim'], dtype=self.dtype,
                  activation=self.activation, epsilon=self.layer_norm_epsilon,
                  name='MAPHead_0')(x[:, lead:])
    if self.fc_norm:
      x = nn.LayerNorm(epsilon=self.layer_norm_epsilon, dtype=self.dtype,
                       name='fc_norm')(x)
    if self.representation_size:
      x = nn.tanh(nn.Dense(self.representation_size, dtype=self.dtype,
                           name='pre_logits')(x))
    if not self.num_classes:
      # Without heads a distilled model's features are its two tokens' mean (timm).
      return (x if dist is None else (x + dist) / 2).astype(jnp.float32)
    head = lambda name: nn.Dense(  # noqa: E731
        self.num_classes, dtype=self.dtype, name=name,
        kernel_init=nn.initializers.zeros,
        bias_init=nn.initializers.constant(self.head_bias_init))
    x = head('head')(x)
    if dist is not None:  # DeiT: the class and distillation heads averaged
      x = (x + head('head_dist')(dist)) / 2
    return x.astype(jnp.float32)


def _choice(option: str, value: Any, allowed: Sequence[Any]) -> None:
  if value not in allowed:
    raise ValueError(f'Unknown {option} {value!r}; use one of '
                     f'{", ".join(map(str, allowed))}.')


def check_options(model: VisionTransformer) -> None:
  """One-line ValueError for an unknown option value or a combination timm refuses."""
  _choice('classifier', model.classifier, CLASSIFIERS)
  _choice('activation', model.activation, ACTIVATIONS)
  _choice('class_token', model.class_token, (None, True, False))
  _choice('matmul', model.matmul, fp8.MATMULS)
  for key in ('distilled', 'no_embed_class', 'qk_norm', 'pre_norm', 'mlp_norm',
              'qkv_bias', 'fc_norm', 'fused_qkv'):
    _choice(key, getattr(model, key), (True, False))
  if not isinstance(model.num_registers, int) or model.num_registers < 0:
    raise ValueError(f'num_registers={model.num_registers!r} must be an int >= 0.')
  if model.layer_scale is not None and not isinstance(model.layer_scale, (int, float)):
    raise ValueError(f'layer_scale={model.layer_scale!r} must be an init value '
                     '(e.g. 1e-5) or None.')
  if not isinstance(model.layer_norm_epsilon, (int, float)) or (
      model.layer_norm_epsilon <= 0):
    raise ValueError(f'layer_norm_epsilon={model.layer_norm_epsilon!r} must be a '
                     'positive number (1e-6 as published, CLIP 1e-5).')
  token = has_class_token(model)
  if model.classifier in _TOKEN_CLASSIFIERS and not token:
    raise ValueError(f'classifier={model.classifier!r} reads the class token but '
                     'class_token=False; use classifier gap or map.')
  if model.fc_norm and model.classifier not in ('token', 'gap', 'map'):
    raise ValueError(f'fc_norm normalises the pooled token; classifier '
                     f'{model.classifier!r} pools none: use token, gap or map.')
  if model.distilled and (model.classifier != 'token' or model.fc_norm or
                          model.representation_size):
    raise ValueError('distilled=True reads the class and distillation tokens: it '
                     'needs classifier=token without fc_norm or representation_size.')
  if model.classifier == 'map' and model.activation == 'swiglu':
    raise ValueError("classifier='map' with activation='swiglu' is not supported: "
                     'the MAP head has a plain MLP; use another activation.')


def patch_embedding(model: VisionTransformer, **kwargs: Any) -> PatchEmbedding:
  """The patch embedding of `model` (its parameters are params['embedding'])."""
  return PatchEmbedding(model.hidden_size, tuple(model.patches['size']),
                        dtype=model.dtype, method=model.patch_embedding,
                        use_bias=not getattr(model, 'pre_norm', False), **kwargs)


def encoder(model: VisionTransformer, **overrides: Any) -> Encoder:
  """The Transformer of `model` (its parameters are params['Transformer']).

  Masked pre-training objectives run it on tokens they prepared themselves;
  `overrides` (e.g. add_position_embedding=False) change fields of the Encoder.
  """
  kwargs = dict(dtype=model.dtype, attention=model.attention,
                attention_pad_multiple=model.attention_pad_multiple,
                remat=model.remat, scan_layers=model.scan_layers,
                stochastic_depth=model.stochastic_depth,
                final_norm=not model.fc_norm,
                num_prefix_tokens=num_prefix_tokens(model),
                no_embed_class=model.no_embed_class, pre_norm=model.pre_norm,
                activation=model.activation, mlp_norm=model.mlp_norm,
                layer_scale=model.layer_scale, qk_norm=model.qk_norm,
                qkv_bias=model.qkv_bias,
                layer_norm_epsilon=model.layer_norm_epsilon,
                matmul=model.matmul, fused_qkv=model.fused_qkv,
                block=type(model).block, block_fields=tuple(model.block_fields()),
                **dict(model.transformer))
  kwargs.update(overrides)
  return Encoder(**kwargs)


def has_class_token(model: Any) -> bool:
  """Whether a model (or its fields) prepends a class token to the patch tokens."""
  token = _get(model, 'class_token')
  if token is None:
    return _get(model, 'classifier', 'token') in _TOKEN_CLASSIFIERS
  return bool(token)


def num_prefix_tokens(model: Any) -> int:
  """Tokens before the patches: class + distillation + registers (timm's count)."""
  return (int(has_class_token(model)) + int(bool(_get(model, 'distilled')))
          + int(_get(model, 'num_registers') or 0))


def posemb_prefix_tokens(model: Any) -> int:
  """Prefix tokens that have a position embedding (none with no_embed_class)."""
  return 0 if _get(model, 'no_embed_class') else num_prefix_tokens(model)


def transformer_flops(tokens: int, width: int, mlp_dim: int, layers: int,
                      mlp_matmuls: int = 2) -> float:
  """Matmul FLOPs of `layers` pre-LN blocks on `tokens` tokens of `width`.

  `mlp_matmuls` is 3 for SwiGLU (gate, value and output projections).
  """
  n, d = tokens, width
  per_layer = (2.0 * n * d * 3 * d      # fused QKV projection
               + 2 * 2.0 * n * n * d    # q.k^T and attention-weighted v
               + 2.0 * n * d * d        # output projection
               + mlp_matmuls * 2.0 * n * d * mlp_dim)  # the MLP matmuls
  return layers * per_layer


def map_head_flops(tokens: int, width: int, mlp_dim: int) -> float:
  """Matmul FLOPs of a MAP head: one probe attending to `tokens` tokens, then its MLP."""
  d = width
  return (2.0 * d * d                  # probe query projection
          + 2.0 * tokens * d * 2 * d   # key and value projections
          + 2 * 2.0 * tokens * d       # the probe's attention products
          + 2.0 * d * d                # output projection
          + 2 * 2.0 * d * mlp_dim)     # its MLP


# ----------------------------------------------------------------------------
# The family record (vit_jax.models.families).

POSEMB_PATH = ('Transformer', 'posembed_input', 'pos_embedding')


def _get(d: Any, key: str, default: Any = None) -> Any:
  if isinstance(d, Mapping):
    return d.get(key, default)
  return getattr(d, key, default)


def _conv_flops(out_hw: int, k: int, cin: int, cout: int) -> float:
  return 2.0 * out_hw * k * k * cin * cout


def _resnet_flops(res: int, num_layers: Sequence[int], width_factor: float):
  """Forward FLOPs, output side length and channels of the hybrid's BiT ResNet."""
  width = int(64 * width_factor)
  s = math.ceil(res / 2)  # 7x7 root conv, stride 2, SAME.
  flops = _conv_flops(s * s, 7, 3, width)
  s = math.ceil(s / 2)  # 3x3 max pool, stride 2.
  cin = width
  for i, units in enumerate(num_layers):
    f = width * 2**i
    for u in range(units):
      stride = 2 if (i > 0 and u == 0) else 1
      s_out = math.ceil(s / stride)
      flops += _conv_flops(s * s, 1, cin, f)
      flops += _conv_flops(s_out * s_out, 3, f, f)
      flops += _conv_flops(s_out * s_out, 1, f, 4 * f)
      if cin != 4 * f or stride != 1:
        flops += _conv_flops(s_out * s_out, 1, cin, 4 * f)
      cin, s = 4 * f, s_out
  return flops, s, cin


def forward_flops(c: Mapping[str, Any], res: int, num_classes: int) -> float:
  """Matmul/conv FLOPs of one forward pass of a ViT or hybrid at `res` pixels."""
  d = c['hidden_size']
  t = c['transformer']
  mlp, layers = _get(t, 'mlp_dim'), _get(t, 'num_layers')
  patch = tuple(_get(c['patches'], 'size'))[0]
  flops, side, channels = 0.0, res, 3
  resnet_cfg = c.get('resnet')
  if resnet_cfg:
    flops, side, channels = _resnet_flops(
        res, tuple(_get(resnet_cfg, 'num_layers')),
        _get(resnet_cfg, 'width_factor', 1))
  grid = side // patch
  patches = grid * grid
  flops += 2.0 * patches * patch * patch * channels * d
  classifier = _get(c, 'classifier', 'token')
  n = patches + num_prefix_tokens(c)
  swiglu = _get(c, 'activation') == 'swiglu'
  flops += transformer_flops(n, d, mlp, layers, mlp_matmuls=3 if swiglu else 2)
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


def _patch_tokens(model: nn.Module, params: Mapping[str, Any]) -> Optional[int]:
  posemb = families.get_path(params, POSEMB_PATH)
  if posemb is None:
    return None
  return int(posemb.shape[1]) - posemb_prefix_tokens(model)


def _is_square(n: int) -> bool:
  return n > 0 and math.isqrt(n) ** 2 == n


def prefix_tokens_of_params(params: Mapping[str, Any]) -> int:
  """Prefix tokens a parameter tree holds (class, distillation, registers)."""
  registers = families.get_path(params, ('registers',))
  return (int('cls' in params) + int('dist_token' in params)
          + (0 if registers is None else int(registers.shape[1])))


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


def _fields_from_params(params: Mapping[str, Any]) -> dict:
  """The variant options a ViT parameter tree fixes (see the module docstring)."""
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


# Prefix tokens' parameters, in token order: (key, token count of a model or fields).
PREFIX_KEYS = ('cls', 'dist_token', 'registers')


def _prefix_layout(model: Any) -> list[tuple[str, int]]:
  """[(parameter key, tokens)] of a model's (or its fields') prefix tokens, in order."""
  counts = (int(has_class_token(model)), int(bool(_get(model, 'distilled'))),
            int(_get(model, 'num_registers') or 0))
  return [(k, c) for k, c in zip(PREFIX_KEYS, counts) if c]


def _prefix_layout_of_params(params: Mapping[str, Any]) -> list[tuple[str, int]]:
  """The same layout as a parameter tree holds it."""
  return [(k, int(params[k].shape[1])) for k in PREFIX_KEYS if k in params]


def embed(model: VisionTransformer, params: Mapping[str, Any], images: jax.Array, *,
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
  x = patch_embedding(model).apply({'params': params['embedding']}, images)
  n, h, w, d = x.shape
  x = x.reshape(n, h * w, d)
  prefix = [jnp.broadcast_to(params[k].astype(x.dtype), (n, c, d))
            for k, c in _prefix_layout(model)]
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


def encode(model: VisionTransformer, params: Mapping[str, Any], tokens: jax.Array, *,
           train: bool = False, rngs: Optional[Mapping[str, jax.Array]] = None,
           add_posemb: bool = False) -> jax.Array:
  """The blocks (after pre_norm) and the final norm on [prefix + patch] tokens.

  `add_posemb` adds the tree's position embedding (and its dropout) first, as
  the model does; else the tokens come from `embed` with theirs.
  """
  return encoder(model, add_position_embedding=add_posemb).apply(
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
         else _prefix_layout_of_params(checkpoint))
  new = [] if _get(fields, 'no_embed_class') else _prefix_layout(fields)
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


def _rgb_filters(model: nn.Module, params: Mapping[str, Any]) -> Any:
  # A hybrid embeds ResNet features, not RGB pixels.
  return None if model.resnet is not None else params['embedding']['kernel']


def _layer_of(path: tuple[str, ...]) -> Optional[int]:
  """0: patch/ResNet embedding, class token, position embedding; i + 1: encoderblock_i."""
  if path[0] in ('head', 'head_dist', 'pre_logits', 'fc_norm', 'MAPHead_0'):
    return None
  if path[0] != 'Transformer':
    return 0
  if path[1] == 'posembed_input':
    return 0
  block = re.fullmatch(r'encoderblock_(\d+)', path[1])
  return int(block.group(1)) + 1 if block else None  # encoder_norm: on top


FAMILY = families.Family(
    name='vit',
    module=VisionTransformer,
    signature=('hidden_size', 'transformer'),
    # None / '' / KEEP: the preset's value (vit_jax/configs/base.py's config.model).
    options={
        'num_classes': families.KEEP, 'representation_size': families.KEEP,
        'dropout_rate': families.KEEP, 'dtype': 'auto', 'attention': 'auto',
        'attention_pad_multiple': 8, 'remat': 'none', 'scan_layers': False,
        'patch_embedding': 'conv', 'stochastic_depth': 0.0,
        'head_bias_init': 0.0, 'fc_norm': False,
        'classifier': '', 'class_token': None, 'num_registers': families.KEEP,
        'distilled': None, 'no_embed_class': None, 'layer_scale': families.KEEP,
        'qk_norm': None, 'pre_norm': None, 'activation': '', 'mlp_norm': None,
        'qkv_bias': None, 'layer_norm_epsilon': families.KEEP, 'matmul': 'default',
        'fused_qkv': True},
    forward_flops=forward_flops,
    width=lambda c: c['hidden_size'],
    patch_tokens=_patch_tokens,
    fields_from_params=_fields_from_params,
    nested=('transformer',),
    posemb_path=POSEMB_PATH,
    class_token=has_class_token,
    class_token_key='cls',
    prefix_tokens=num_prefix_tokens,
    posemb_prefix_tokens=posemb_prefix_tokens,
    prefix_keys=PREFIX_KEYS,
    embed=embed,
    encode=encode,
    adapt_posemb=adapt_posemb,
    fresh_keys=('head', 'head_dist'),
    rgb_filters=_rgb_filters,
    attention_fields={'attention': 'xla', 'remat': False, 'scan_layers': False},
    layer_of=_layer_of,
    final_norm_keys=('Transformer/encoder_norm', 'fc_norm'),
    # Pre-Linen numbering inside encoder blocks, as the original loader and timm read it.
    npz_renames={r'^encoderblock_\d+$': {
        'LayerNorm_0': 'LayerNorm_0',
        'MultiHeadDotProductAttention_0': 'MultiHeadDotProductAttention_1',
        'LayerNorm_1': 'LayerNorm_2',
        'MlpBlock_0': 'MlpBlock_3'}},
)
