"""The ViT's Flax modules: the encoder block, the Transformer and the VisionTransformer.

`VisionTransformer` carries the options (vit_jax/models/vit/options.py, each with timm's
name) as fields, the public `get_model(name, <option>=...)` contract; it hands the encoder
ONE frozen `BlockConfig`, which each block reads (as timm resolves its layers once and
hands one block function down). Every default is the published ViT: its parameter tree
and logits do not change.

Tokens are [class?, distillation?, registers..., patches] (prefix tokens first;
`num_prefix_tokens(model)` below counts them, as timm's `num_prefix_tokens`).
"""
import dataclasses
import math
from typing import Any, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import attention as attention_lib
from vit_jax.models import masking
from vit_jax.models import mlp_kernel
from vit_jax.models import resnet
from vit_jax.models.vit import layers
from vit_jax.models.vit import options

TOKEN_CLASSIFIERS = ('token', 'token_unpooled')


@dataclasses.dataclass(frozen=True)
class BlockConfig:
  """What every encoder block reads: the transformer sizes and the block options."""
  mlp_dim: int
  num_heads: int
  dtype: Any = jnp.float32
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  attention: str = 'xla'
  attention_pad_multiple: int = 8
  activation: str = 'gelu_tanh'
  norm: str = 'layer_norm'
  mlp_norm: bool = False
  layer_scale: Optional[float] = None
  qk_norm: bool = False
  qkv_bias: bool = True
  layer_norm_epsilon: float = 1e-6
  matmul: str = 'default'
  fused_qkv: Optional[bool] = None  # None: the faster for the backend (options.py)
  mlp_kernel: str = 'xla'
  mlp_kernel_blocks: str = ''

  def make_norm(self, name: str) -> nn.Module:
    """The configured norm as a child module `name`."""
    return layers.norm(self.norm, self.layer_norm_epsilon, self.dtype, name)


class Encoder1DBlock(nn.Module):
  """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""
  config: BlockConfig
  stochastic_depth: float = 0.0
  deterministic: bool = True
  valid_tokens: Optional[int] = None

  @nn.compact
  def __call__(self, inputs: jax.Array, drop_rate: Any = None) -> jax.Array:
    """Applies the block; `drop_rate` (scan) overrides `stochastic_depth`."""
    c = self.config
    rate = self.stochastic_depth if drop_rate is None else drop_rate
    x = c.make_norm('LayerNorm_0')(inputs)
    x = attention_lib.MultiHeadDotProductAttention(
        num_heads=c.num_heads, dtype=c.dtype,
        dropout_rate=c.attention_dropout_rate,
        deterministic=self.deterministic, implementation=c.attention,
        pad_multiple=c.attention_pad_multiple,
        valid_tokens=self.valid_tokens, qkv_bias=c.qkv_bias,
        qk_norm=c.qk_norm, epsilon=c.layer_norm_epsilon,
        matmul=c.matmul,
        fused_qkv=options.resolve_fused_qkv(c.fused_qkv, train=not self.deterministic),
        name='MultiHeadDotProductAttention_0')(x)
    x = nn.Dropout(c.dropout_rate)(x, deterministic=self.deterministic)
    if c.layer_scale:
      x = layers.LayerScale(c.layer_scale, name='LayerScale_0')(x)
    x = self.residual(inputs, layers.drop_path(self, x, rate, self.deterministic))
    y = c.make_norm('LayerNorm_1')(x)
    y = layers.MlpBlock(mlp_dim=c.mlp_dim, dtype=c.dtype,
                        dropout_rate=c.dropout_rate,
                        deterministic=self.deterministic, activation=c.activation,
                        norm=c.norm if c.mlp_norm else None,
                        epsilon=c.layer_norm_epsilon,
                        matmul=c.matmul, kernel=c.mlp_kernel,
                        kernel_blocks=c.mlp_kernel_blocks, name='MlpBlock_0')(y)
    if c.layer_scale:
      y = layers.LayerScale(c.layer_scale, name='LayerScale_1')(y)
    return self.residual(x, layers.drop_path(self, y, rate, self.deterministic))

  def residual(self, x: jax.Array, branch: jax.Array) -> jax.Array:
    """Adds a branch to the residual stream (the hook a block subclass may change)."""
    return x + branch


class Encoder(nn.Module):
  """Position embedding, `num_layers` blocks and the final norm.

  When the attention runs on cuDNN the tokens are padded once here (to an
  even multiple of `attention_pad_multiple`) and sliced back after the final
  norm, so no block pads or slices; padded keys are masked.
  With `scan_layers` the blocks run under one lax.scan over parameters stacked
  at compute time, so the stored tree keeps its encoderblock_{i} entries while
  the compiled program holds a single block (much faster to compile for L/H).
  """
  config: BlockConfig
  num_layers: int
  add_position_embedding: bool = True
  remat: Any = False
  scan_layers: bool = False
  stochastic_depth: float = 0.0
  final_norm: bool = True  # False: the model normalises after pooling (fc_norm)
  # Leading tokens (class, distillation, registers); with no_embed_class the
  # position embedding covers only the patch tokens after them.
  num_prefix_tokens: int = 0
  no_embed_class: bool = False
  posemb: str = 'learn'    # 'sincos2d': a fixed table of the patch grid, no parameter
  pre_norm: bool = False   # CLIP's norm before the blocks: pre_norm
  block: Any = Encoder1DBlock  # the block class (a model's `block`)

  def _pads_once(self, width: int, train: bool) -> bool:
    """Whether every block's attention will run on cuDNN (then pad here)."""
    c = self.config
    impl = attention_lib.resolve_implementation(c.attention, c.dtype, width // c.num_heads)
    return impl == 'cudnn' and not (train and c.attention_dropout_rate > 0)

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool,
               grid: Optional[tuple[int, int]] = None) -> jax.Array:
    """The blocks on [prefix + patch] tokens; `grid` (rows, cols): default square."""
    c = self.config
    policy = layers.remat_policy(self.remat)
    if self.add_position_embedding:
      if self.posemb == 'sincos2d':
        x = self._add_sincos(x, grid)
      elif self.no_embed_class:
        lead = self.num_prefix_tokens
        x = jnp.concatenate(
            [x[:, :lead], layers.AddPositionEmbs(name='posembed_input')(x[:, lead:])],
            axis=1)
      else:
        x = layers.AddPositionEmbs(name='posembed_input')(x)
      x = nn.Dropout(c.dropout_rate)(x, deterministic=not train)
    if self.pre_norm:
      x = c.make_norm('pre_norm')(x)
    # Stochastic depth grows linearly with depth, 0 at the first block.
    rates = [self.stochastic_depth * i / max(self.num_layers - 1, 1)
             for i in range(self.num_layers)]
    tokens, valid = x.shape[1], None
    if self._pads_once(x.shape[-1], train):
      padded = attention_lib.padded_length(tokens, c.attention_pad_multiple)
      x = jnp.pad(x, [(0, 0), (0, padded - tokens), (0, 0)])
      valid = tokens
    if self.scan_layers and not self.is_initializing():
      x = self._scan_blocks(x, rates, policy, train, valid)
    else:
      block_cls = self.block
      if policy != 'none':
        block_cls = nn.remat(self.block, policy=layers.POLICY_FNS[policy])
      for i, rate in enumerate(rates):
        x = block_cls(config=c, stochastic_depth=rate, deterministic=not train,
                      valid_tokens=valid, name=f'encoderblock_{i}')(x)
    if self.final_norm:
      x = c.make_norm('encoder_norm')(x)
    return x[:, :tokens]

  def _add_sincos(self, x: jax.Array, grid: Optional[tuple[int, int]]) -> jax.Array:
    """x with big_vision's fixed sin-cos table added to its patch tokens."""
    lead = self.num_prefix_tokens
    if grid is None:
      side = math.isqrt(x.shape[1] - lead)
      grid = (side, side)
    if grid[0] * grid[1] != x.shape[1] - lead:
      raise ValueError(f'{x.shape[1] - lead} patch tokens do not form the grid {grid}.')
    table = masking.sincos_posemb(tuple(grid), x.shape[-1], layout='big_vision')
    return jnp.concatenate([x[:, :lead], x[:, lead:] + jnp.asarray(table, x.dtype)], axis=1)

  def _scan_blocks(self, x: jax.Array, rates: list, policy: str,
                   train: bool, valid: Optional[int]) -> jax.Array:
    """Runs the blocks under lax.scan over their stacked parameters."""
    c = self.config
    params = self.variables['params']
    stacked = jax.tree.map(
        lambda *leaves: jnp.stack(leaves),
        *[params[f'encoderblock_{i}'] for i in range(self.num_layers)])
    block = self.block(config=c, deterministic=not train, valid_tokens=valid, parent=None)
    random = train and (c.dropout_rate > 0 or self.stochastic_depth > 0 or
                        c.attention_dropout_rate > 0)
    keys = (jax.random.split(self.make_rng('dropout'), self.num_layers)
            if random else None)
    drop = jnp.asarray(rates, jnp.float32) if self.stochastic_depth else None

    def body(carry, layer):
      p, key, rate = layer
      rngs = {'dropout': key} if key is not None else {}
      return block.apply({'params': p}, carry, rate, rngs=rngs), None

    if policy != 'none':
      body = jax.checkpoint(body, policy=layers.POLICY_FNS[policy], prevent_cse=False)
    x, _ = jax.lax.scan(body, x, (stacked, keys, drop))
    return x


class VisionTransformer(nn.Module):
  """ViT: patch embedding (optionally of a ResNet's features) + Transformer + head.

  Takes NHWC images in [-1, 1]; returns float32 logits (or features when
  num_classes is None/0 or the classifier is unpooled). The options (classifier ...
  fused_qkv) are declared, with timm's names, in vit_jax/models/vit/options.py.
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
  remat: Any = False            # bool, or a policy name from layers.REMAT_POLICIES
  scan_layers: bool = False
  # 'conv' measured 14% faster than 'matmul' for ViT-B/16 training on an H100.
  patch_embedding: str = 'conv'
  stochastic_depth: float = 0.0
  fc_norm: bool = False
  class_token: Optional[bool] = None   # None: as the classifier implies
  num_registers: int = 0
  distilled: bool = False
  no_embed_class: bool = False
  posemb: str = 'learn'
  layer_scale: Optional[float] = None  # init value; None or 0: no layer scale
  qk_norm: bool = False
  pre_norm: bool = False
  activation: str = 'gelu_tanh'
  norm: str = 'layer_norm'
  mlp_norm: bool = False
  qkv_bias: bool = True
  layer_norm_epsilon: float = 1e-6
  matmul: str = 'default'
  fused_qkv: Optional[bool] = None
  mlp_kernel: str = 'xla'
  mlp_kernel_blocks: str = ''

  # The encoder block class (a subclass may change the block and `block_config`).
  block = Encoder1DBlock

  def block_config(self) -> BlockConfig:
    """The one config every encoder block of this model reads."""
    t = dict(self.transformer)
    return BlockConfig(
        mlp_dim=t['mlp_dim'], num_heads=t['num_heads'], dtype=self.dtype,
        dropout_rate=t.get('dropout_rate', 0.1),
        attention_dropout_rate=t.get('attention_dropout_rate', 0.1),
        **{name: getattr(self, name) for name in options.BLOCK_OPTIONS})

  def __post_init__(self):
    super().__post_init__()
    check_options(self)

  @nn.compact
  def __call__(self, inputs: jax.Array, *, train: bool = False) -> jax.Array:
    if inputs.ndim != 4:
      raise ValueError(f'Expected NHWC images, got shape {inputs.shape}.')
    prefix, x, grid = self._embed_tokens(inputs)
    x = encoder(self, name='Transformer')(jnp.concatenate(prefix + [x], axis=1),
                                          train=train, grid=grid)
    return self._head(x)

  def _embed_tokens(self, inputs: jax.Array) -> tuple[list, jax.Array, tuple[int, int]]:
    """(prefix tokens [n, 1 or R, D] each, patch tokens [n, h * w, D], (h, w)), no posemb."""
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
    return prefix, x, (h, w)

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
      x = layers.MAPHead(num_heads=t['num_heads'], mlp_dim=t['mlp_dim'],
                         dtype=self.dtype, activation=self.activation, norm=self.norm,
                         epsilon=self.layer_norm_epsilon, name='MAPHead_0')(x[:, lead:])
    if self.fc_norm:
      x = layers.norm(self.norm, self.layer_norm_epsilon, self.dtype, 'fc_norm')(x)
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


def check_options(model: VisionTransformer) -> None:
  """One-line ValueError for an unknown option value or a combination timm refuses."""
  options.check(model)
  token = has_class_token(model)
  if model.classifier in TOKEN_CLASSIFIERS and not token:
    raise ValueError(f'classifier={model.classifier!r} reads the class token but '
                     'class_token=False; use classifier gap or map.')
  if model.fc_norm and model.classifier not in ('token', 'gap', 'map'):
    raise ValueError(f'fc_norm normalises the pooled token; classifier '
                     f'{model.classifier!r} pools none: use token, gap or map.')
  if model.distilled and (model.classifier != 'token' or model.fc_norm or
                          model.representation_size):
    raise ValueError('distilled=True reads the class and distillation tokens: it '
                     'needs classifier=token without fc_norm or representation_size.')
  if model.posemb == 'sincos2d' and model.hidden_size % 4:
    raise ValueError(f'posemb=sincos2d needs a width divisible by 4, not '
                     f'hidden_size={model.hidden_size}; use posemb=learn.')
  if model.mlp_kernel == 'pallas':
    layers.check_fused_mlp(model.activation, model.mlp_norm, model.matmul)
    mlp_kernel.parse_blocks(model.mlp_kernel_blocks)
  if model.classifier == 'map' and model.activation in layers.GATED_ACTIVATIONS:
    raise ValueError(f"classifier='map' with activation={model.activation!r} is not "
                     'supported: the MAP head has a plain MLP; use another activation.')


def patch_embedding(model: VisionTransformer, **kwargs: Any) -> layers.PatchEmbedding:
  """The patch embedding of `model` (its parameters are params['embedding'])."""
  return layers.PatchEmbedding(model.hidden_size, tuple(model.patches['size']),
                               dtype=model.dtype, method=model.patch_embedding,
                               use_bias=not getattr(model, 'pre_norm', False), **kwargs)


def encoder(model: VisionTransformer, **overrides: Any) -> Encoder:
  """The Transformer of `model` (its parameters are params['Transformer']).

  Masked pre-training objectives run it on tokens they prepared themselves;
  `overrides` (e.g. add_position_embedding=False) change fields of the Encoder.
  """
  kwargs = dict(config=model.block_config(),
                num_layers=dict(model.transformer)['num_layers'],
                remat=model.remat, scan_layers=model.scan_layers,
                stochastic_depth=model.stochastic_depth,
                final_norm=not model.fc_norm,
                num_prefix_tokens=num_prefix_tokens(model),
                no_embed_class=model.no_embed_class, pre_norm=model.pre_norm,
                posemb=getattr(model, 'posemb', 'learn'),
                block=type(model).block)
  kwargs.update(overrides)
  return Encoder(**kwargs)


def field_of(d: Any, key: str, default: Any = None) -> Any:
  """d[key] of a mapping, or the attribute of a module (default where absent)."""
  if isinstance(d, Mapping):
    return d.get(key, default)
  return getattr(d, key, default)


def has_class_token(model: Any) -> bool:
  """Whether a model (or its fields) prepends a class token to the patch tokens."""
  token = field_of(model, 'class_token')
  if token is None:
    return field_of(model, 'classifier', 'token') in TOKEN_CLASSIFIERS
  return bool(token)


# The prefix tokens' parameters, in token order.
PREFIX_KEYS = ('cls', 'dist_token', 'registers')


def prefix_layout(model: Any) -> list[tuple[str, int]]:
  """[(parameter key, tokens)] of a model's (or its fields') prefix tokens, in order."""
  counts = (int(has_class_token(model)), int(bool(field_of(model, 'distilled'))),
            int(field_of(model, 'num_registers') or 0))
  return [(k, c) for k, c in zip(PREFIX_KEYS, counts) if c]


def num_prefix_tokens(model: Any) -> int:
  """Tokens before the patches: class + distillation + registers (timm's count)."""
  return sum(count for _, count in prefix_layout(model))


def posemb_prefix_tokens(model: Any) -> int:
  """Prefix tokens that have a position embedding (none with no_embed_class)."""
  return 0 if field_of(model, 'no_embed_class') else num_prefix_tokens(model)
