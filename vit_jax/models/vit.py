"""Vision Transformer (and its ResNet hybrid) with the original Linen parameter tree."""
import math
import re
from typing import Any, Mapping, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import attention as attention_lib
from vit_jax.models import families
from vit_jax.models import resnet

CLASSIFIERS = ('token', 'gap', 'unpooled', 'token_unpooled')
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

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    if self.method not in PATCH_EMBEDDINGS:
      raise ValueError(f'Unknown patch_embedding {self.method!r}; use one of '
                       f'{PATCH_EMBEDDINGS}.')
    ph, pw = self.patch
    n, h, w, c = x.shape
    kernel = self.param('kernel', nn.initializers.lecun_normal(),
                        (ph, pw, c, self.features)).astype(self.dtype)
    bias = self.param('bias', nn.initializers.zeros, (self.features,))
    x = x.astype(self.dtype)
    if self.method == 'conv':
      y = jax.lax.conv_general_dilated(
          x, kernel, (ph, pw), 'VALID',
          dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
    else:
      x = x.reshape(n, h // ph, ph, w // pw, pw, c).transpose(0, 1, 3, 2, 4, 5)
      y = x.reshape(n, h // ph, w // pw, ph * pw * c) @ kernel.reshape(
          ph * pw * c, self.features)
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


class MlpBlock(nn.Module):
  """Dense -> tanh-GELU -> Dropout -> Dense -> Dropout."""
  mlp_dim: int
  dtype: Any = jnp.float32
  out_dim: Optional[int] = None
  dropout_rate: float = 0.1
  deterministic: bool = True

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    out_dim = x.shape[-1] if self.out_dim is None else self.out_dim
    dense = lambda n: nn.Dense(  # noqa: E731
        n, dtype=self.dtype, kernel_init=nn.initializers.xavier_uniform(),
        bias_init=nn.initializers.normal(stddev=1e-6))
    x = nn.gelu(dense(self.mlp_dim)(x), approximate=True)
    x = nn.Dropout(self.dropout_rate)(x, deterministic=self.deterministic)
    x = dense(out_dim)(x)
    return nn.Dropout(self.dropout_rate)(x, deterministic=self.deterministic)


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

  @nn.compact
  def __call__(self, inputs: jax.Array, drop_rate: Any = None) -> jax.Array:
    """Applies the block; `drop_rate` (scan) overrides `stochastic_depth`."""
    rate = self.stochastic_depth if drop_rate is None else drop_rate
    norm = lambda name: nn.LayerNorm(  # noqa: E731
        epsilon=1e-6, dtype=self.dtype, name=name)
    x = norm('LayerNorm_0')(inputs)
    x = attention_lib.MultiHeadDotProductAttention(
        num_heads=self.num_heads, dtype=self.dtype,
        dropout_rate=self.attention_dropout_rate,
        deterministic=self.deterministic, implementation=self.attention,
        pad_multiple=self.attention_pad_multiple,
        valid_tokens=self.valid_tokens,
        name='MultiHeadDotProductAttention_0')(x)
    x = nn.Dropout(self.dropout_rate)(x, deterministic=self.deterministic)
    x = inputs + drop_path(self, x, rate, self.deterministic)
    y = norm('LayerNorm_1')(x)
    y = MlpBlock(mlp_dim=self.mlp_dim, dtype=self.dtype,
                 dropout_rate=self.dropout_rate,
                 deterministic=self.deterministic, name='MlpBlock_0')(y)
    return x + drop_path(self, y, rate, self.deterministic)


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

  def _block_kwargs(self, train: bool, valid: Optional[int]) -> dict:
    return dict(mlp_dim=self.mlp_dim, num_heads=self.num_heads,
                dtype=self.dtype, dropout_rate=self.dropout_rate,
                attention_dropout_rate=self.attention_dropout_rate,
                deterministic=not train, attention=self.attention,
                attention_pad_multiple=self.attention_pad_multiple,
                valid_tokens=valid)

  def _pads_once(self, width: int, train: bool) -> bool:
    """Whether every block's attention will run on cuDNN (then pad here)."""
    impl = attention_lib.resolve_implementation(
        self.attention, self.dtype, width // self.num_heads)
    return impl == 'cudnn' and not (train and self.attention_dropout_rate > 0)

  @nn.compact
  def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
    policy = remat_policy(self.remat)
    if self.add_position_embedding:
      x = AddPositionEmbs(name='posembed_input')(x)
      x = nn.Dropout(self.dropout_rate)(x, deterministic=not train)
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
      block_cls = Encoder1DBlock
      if policy != 'none':
        block_cls = nn.remat(Encoder1DBlock, policy=_POLICY_FNS[policy])
      for i, rate in enumerate(rates):
        x = block_cls(stochastic_depth=rate, name=f'encoderblock_{i}',
                      **self._block_kwargs(train, valid))(x)
    if self.final_norm:
      x = nn.LayerNorm(epsilon=1e-6, dtype=self.dtype, name='encoder_norm')(x)
    return x[:, :tokens]

  def _scan_blocks(self, x: jax.Array, rates: list, policy: str,
                   train: bool, valid: Optional[int]) -> jax.Array:
    """Runs the blocks under lax.scan over their stacked parameters."""
    params = self.variables['params']
    stacked = jax.tree.map(
        lambda *leaves: jnp.stack(leaves),
        *[params[f'encoderblock_{i}'] for i in range(self.num_layers)])
    block = Encoder1DBlock(parent=None, **self._block_kwargs(train, valid))
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
  num_classes is None/0 or the classifier is unpooled).
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

  @nn.compact
  def __call__(self, inputs: jax.Array, *, train: bool = False) -> jax.Array:
    if self.classifier not in CLASSIFIERS:
      raise ValueError(f'Unknown classifier {self.classifier!r}; use one of '
                       f'{CLASSIFIERS}.')
    if self.fc_norm and self.classifier not in ('token', 'gap'):
      raise ValueError(f'fc_norm normalises the pooled token; classifier '
                       f'{self.classifier!r} pools none: use token or gap.')
    if inputs.ndim != 4:
      raise ValueError(f'Expected NHWC images, got shape {inputs.shape}.')
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
    if self.classifier in _TOKEN_CLASSIFIERS:
      cls = self.param('cls', nn.initializers.zeros, (1, 1, c))
      x = jnp.concatenate([jnp.tile(cls.astype(x.dtype), (n, 1, 1)), x], axis=1)
    x = encoder(self, name='Transformer')(x, train=train)
    if self.classifier == 'token':
      x = x[:, 0]
    elif self.classifier == 'gap':
      x = jnp.mean(x, axis=1)
    if self.fc_norm:
      x = nn.LayerNorm(epsilon=1e-6, dtype=self.dtype, name='fc_norm')(x)
    if self.representation_size:
      x = nn.tanh(nn.Dense(self.representation_size, dtype=self.dtype,
                           name='pre_logits')(x))
    if self.num_classes:
      x = nn.Dense(self.num_classes, dtype=self.dtype, name='head',
                   kernel_init=nn.initializers.zeros,
                   bias_init=nn.initializers.constant(self.head_bias_init))(x)
    return x.astype(jnp.float32)


def patch_embedding(model: VisionTransformer, **kwargs: Any) -> PatchEmbedding:
  """The patch embedding of `model` (its parameters are params['embedding'])."""
  return PatchEmbedding(model.hidden_size, tuple(model.patches['size']),
                        dtype=model.dtype, method=model.patch_embedding, **kwargs)


def encoder(model: VisionTransformer, **overrides: Any) -> Encoder:
  """The Transformer of `model` (its parameters are params['Transformer']).

  Masked pre-training objectives run it on tokens they prepared themselves;
  `overrides` (e.g. add_position_embedding=False) change fields of the Encoder.
  """
  kwargs = dict(dtype=model.dtype, attention=model.attention,
                attention_pad_multiple=model.attention_pad_multiple,
                remat=model.remat, scan_layers=model.scan_layers,
                stochastic_depth=model.stochastic_depth,
                final_norm=not getattr(model, 'fc_norm', False), **dict(model.transformer))
  kwargs.update(overrides)
  return Encoder(**kwargs)


def has_class_token(model: VisionTransformer) -> bool:
  """Whether `model` prepends a class token to the patch tokens."""
  return model.classifier in _TOKEN_CLASSIFIERS


def transformer_flops(tokens: int, width: int, mlp_dim: int, layers: int) -> float:
  """Matmul FLOPs of `layers` pre-LN blocks on `tokens` tokens of `width`."""
  n, d = tokens, width
  per_layer = (2.0 * n * d * 3 * d      # fused QKV projection
               + 2 * 2.0 * n * n * d    # q.k^T and attention-weighted v
               + 2.0 * n * d * d        # output projection
               + 2 * 2.0 * n * d * mlp_dim)  # the two MLP matmuls
  return layers * per_layer


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
  classifier = c.get('classifier', 'token')
  n = patches + (classifier in _TOKEN_CLASSIFIERS)
  flops += transformer_flops(n, d, mlp, layers)
  rows = n if classifier in ('unpooled', 'token_unpooled') else 1
  width = d
  rep = c.get('representation_size')
  if rep:
    flops += 2.0 * rows * d * rep
    width = rep
  if num_classes:
    flops += 2.0 * rows * width * num_classes
  return flops


def _patch_tokens(model: nn.Module, params: Mapping[str, Any]) -> Optional[int]:
  posemb = families.get_path(params, POSEMB_PATH)
  if posemb is None:
    return None
  return int(posemb.shape[1]) - int(has_class_token(model))


def _fields_from_params(params: Mapping[str, Any]) -> dict:
  kernel = families.get_path(params, ('pre_logits', 'kernel'))
  return {'representation_size': None if kernel is None else int(kernel.shape[-1]),
          'fc_norm': 'fc_norm' in params}


def _rgb_filters(model: nn.Module, params: Mapping[str, Any]) -> Any:
  # A hybrid embeds ResNet features, not RGB pixels.
  return None if model.resnet is not None else params['embedding']['kernel']


def _layer_of(path: tuple[str, ...]) -> Optional[int]:
  """0: patch/ResNet embedding, class token, position embedding; i + 1: encoderblock_i."""
  if path[0] in ('head', 'pre_logits', 'fc_norm'):
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
    options={
        'num_classes': families.KEEP, 'representation_size': families.KEEP,
        'dropout_rate': families.KEEP, 'dtype': 'auto', 'attention': 'auto',
        'attention_pad_multiple': 8, 'remat': 'none', 'scan_layers': False,
        'patch_embedding': 'conv', 'stochastic_depth': 0.0,
        'head_bias_init': 0.0, 'fc_norm': False},
    forward_flops=forward_flops,
    width=lambda c: c['hidden_size'],
    patch_tokens=_patch_tokens,
    fields_from_params=_fields_from_params,
    nested=('transformer',),
    posemb_path=POSEMB_PATH,
    class_token=has_class_token,
    class_token_key='cls',
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
