"""The ViT family's options, each declared once: default, allowed values, timm / transformers name.

Everything else derives from OPTIONS: the option check (`check`), the family's option list and
the `config.model` section (`config_defaults`), the docs table (`table`). The defaults are the
published ViT: its parameter tree and logits. `UNSET` (None) in a config means "the preset's
value", the one "not set" marker of `config.model`.

A new block option is a line here, a field on `VisionTransformer` and on `BlockConfig`, and its
use in the block (vit_jax/models/vit/model.py); the config, get_model, checkpoints and FLOPs
need nothing.
"""
import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import jax

from vit_jax.models import families
from vit_jax.models import fp8
from vit_jax.models import mlp_kernel
from vit_jax.models.vit import layers

UNSET = families.UNSET  # config.model's one "not set": the preset's value

Allowed = Union[Sequence[Any], Callable[[], Sequence[Any]], None]


@dataclasses.dataclass(frozen=True)
class Option:
  """One option of the family: a VisionTransformer field reachable as config.model.<name>."""
  name: str
  default: Any          # the module's default: the published ViT
  type: type            # the config field's type (for an UNSET placeholder)
  doc: str
  allowed: Allowed = None    # values, or a function giving them (a registry's names)
  timm: str = ''             # timm's VisionTransformer argument
  hf: str = ''               # transformers' config key
  # config.model's default: UNSET keeps the preset's value; run-time knobs (dtype,
  # attention, ...) that presets do not hold have a value of their own.
  config: Any = UNSET
  block: bool = False        # part of BlockConfig (what each encoder block reads)

  def values(self) -> Optional[tuple]:
    """The allowed values, or None when any value of `type` passes."""
    allowed = self.allowed() if callable(self.allowed) else self.allowed
    return None if allowed is None else tuple(allowed)


_BOOL = (True, False)
POSEMBS = ('learn', 'sincos2d')

OPTIONS: tuple[Option, ...] = (
    Option('num_classes', 1000, int, 'classes of the head; 0 or None: no head (features)',
           hf='num_labels'),
    Option('representation_size', None, int, 'pre-logits width (tanh Dense); 0: none'),
    Option('dropout_rate', 0.1, float, 'dropout after the position embedding and in the '
           'blocks (the preset\'s transformer.dropout_rate)', hf='hidden_dropout_prob'),
    Option('dtype', 'float32', str, "compute dtype: 'auto' (bfloat16 on GPU/TPU, float32 "
           'on CPU), bfloat16, float32, float16', config='auto'),
    Option('attention', 'xla', str, "'auto' (cuDNN fused where it runs), 'cudnn', 'xla'",
           config='auto', block=True),
    Option('attention_pad_multiple', 8, int, 'cuDNN attention pads tokens to a multiple',
           config=8, block=True),
    Option('remat', False, str, "rematerialise blocks: 'none' (False), 'full' (True), 'dots'",
           config='none'),
    Option('scan_layers', False, bool, 'lax.scan over the blocks (faster compiles of L/H)',
           config=False),
    Option('patch_embedding', 'conv', str, "'conv' or 'matmul' (same parameters)",
           config='conv'),
    Option('stochastic_depth', 0.0, float, 'drop-path rate of the last block (linear in depth)',
           timm='drop_path_rate', hf='drop_path_rate', config=0.0),
    Option('head_bias_init', 0.0, float, 'initial bias of the head', config=0.0),
    Option('fc_norm', False, bool, 'norm after pooling instead of on the tokens '
           '(fc_norm, no Transformer/encoder_norm)', allowed=_BOOL, timm='fc_norm',
           config=False),
    Option('classifier', 'token', str, "pooling: 'token', 'gap' (mean of the patch tokens), "
           "'map' (attention pooling: MAPHead_0), 'unpooled', 'token_unpooled'",
           allowed=('token', 'gap', 'map', 'unpooled', 'token_unpooled'),
           timm='global_pool'),
    Option('class_token', None, bool, 'None: as the classifier implies; adds cls [1, 1, D]',
           allowed=(None, True, False), timm='class_token'),
    Option('num_registers', 0, int, 'register tokens: registers [1, R, D]',
           timm='reg_tokens'),
    Option('distilled', False, bool, "DeiT's distillation token and head (dist_token, "
           'head_dist); needs classifier=token', allowed=_BOOL),
    Option('posemb', 'learn', str, "position embedding: 'learn' (posembed_input/"
           "pos_embedding) or 'sincos2d' (big_vision's fixed 2-D sin-cos table of the patch "
           'grid, no parameter, recomputed at any resolution; prefix tokens get none)',
           allowed=POSEMBS, config='learn'),
    Option('no_embed_class', False, bool, 'the position embedding covers the patch tokens '
           'only', allowed=_BOOL, timm='no_embed_class'),
    Option('layer_scale', None, float, 'per-channel residual scales initialised to the value '
           '(LayerScale_0/1); 0: none', timm='init_values', hf='layerscale_value',
           block=True),
    Option('qk_norm', False, bool, "norm over each head's query and key", allowed=_BOOL,
           timm='qk_norm', block=True),
    Option('pre_norm', False, bool, "CLIP's norm before the blocks (Transformer/pre_norm); "
           'the patch embedding then has no bias', allowed=_BOOL, timm='pre_norm'),
    Option('activation', 'gelu_tanh', str, "MLP non-linearity: 'gelu_tanh', 'gelu', "
           "'quick_gelu', 'swiglu' (MlpBlock_0/{gate,value,out})",
           allowed=lambda: layers.activation_names(), timm='act_layer',
           hf='hidden_act', block=True),
    Option('norm', 'layer_norm', str, 'the norm of every block, the final norm, fc_norm and '
           'pre_norm (vit_jax/models/vit/layers.py NORMS)',
           allowed=lambda: tuple(layers.NORMS), timm='norm_layer', block=True),
    Option('mlp_norm', False, bool, "norm before the MLP's output projection (EVA02)",
           allowed=_BOOL, timm='scale_mlp_norm', block=True),
    Option('qkv_bias', True, bool, 'bias of query/key/value', allowed=_BOOL,
           timm='qkv_bias', hf='qkv_bias', block=True),
    Option('layer_norm_epsilon', 1e-6, float, 'epsilon of every norm (CLIP 1e-5)',
           timm='norm_layer eps', hf='layer_norm_eps', block=True),
    Option('matmul', 'default', str, "'fp8': the blocks' projections in float8 (Hopper), "
           "scaled by each operand's maximum; 'fp8_delayed': scaled by amax histories "
           "kept in the train state (Transformer Engine's delayed scaling)",
           allowed=fp8.MATMULS, config='default', block=True),
    Option('fused_qkv', None, bool, 'query, key and value as one matmul (False: three; same '
           'function and parameters); None: the faster for the backend and mode '
           '(FUSED_QKV_FASTEST)', allowed=(None, True, False), block=True),
    Option('mlp_kernel', 'xla', str, "'pallas': the MLP's bias + GELU and their gradients "
           'inside its matmuls (Triton on GPU; gelu_tanh/quick_gelu, no MLP dropout; same '
           'parameters)', allowed=mlp_kernel.KERNELS, config='xla', block=True),
    Option('mlp_kernel_blocks', '', str, "mlp_kernel=pallas tiles 'm,n,k,num_warps,num_stages' "
           "('': 128,256,64,8,3)", config='', block=True),
)

# Whether one q/k/v matmul beats three, measured per (backend, train): the H100 step
# (docs/results/gpu_h100*.csv: three +5% in training) and the CPU's
# (docs/results/cpu_levers.csv). A backend not listed gets three.
FUSED_QKV_FASTEST: Mapping[tuple[str, bool], bool] = {
    ('gpu', True): False, ('gpu', False): False,
    ('cpu', True): True, ('cpu', False): True,
}

BY_NAME: Mapping[str, Option] = {o.name: o for o in OPTIONS}
BLOCK_OPTIONS: tuple[str, ...] = tuple(o.name for o in OPTIONS if o.block)


def resolve_fused_qkv(value: Optional[bool], train: bool, backend: str = '') -> bool:
  """fused_qkv's value at trace time: None is the faster for `backend` (default: JAX's)."""
  if value is not None:
    return bool(value)
  return FUSED_QKV_FASTEST.get((backend or jax.default_backend(), train), False)


def config_defaults() -> dict[str, Any]:
  """{option: config.model default}: UNSET for what the preset decides."""
  return {o.name: o.config for o in OPTIONS}


def config_types() -> dict[str, type]:
  """{option: type} of the config fields whose default is UNSET (typed placeholders)."""
  return {o.name: o.type for o in OPTIONS}


def _positive_number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def check(fields: Any) -> None:
  """One-line ValueError for a value an option does not allow (`fields`: the module)."""
  for option in OPTIONS:
    value = getattr(fields, option.name, option.default)
    allowed = option.values()
    if allowed is not None and value not in allowed:
      raise ValueError(f'Unknown {option.name} {value!r}; use one of '
                       f'{", ".join(map(str, allowed))}.')
  registers = fields.num_registers
  if not isinstance(registers, int) or isinstance(registers, bool) or registers < 0:
    raise ValueError(f'num_registers={registers!r} must be an int >= 0.')
  if fields.layer_scale is not None and not isinstance(fields.layer_scale, (int, float)):
    raise ValueError(f'layer_scale={fields.layer_scale!r} must be an init value '
                     '(e.g. 1e-5) or None.')
  if not _positive_number(fields.layer_norm_epsilon):
    raise ValueError(f'layer_norm_epsilon={fields.layer_norm_epsilon!r} must be a '
                     'positive number (1e-6 as published, CLIP 1e-5).')


def table() -> str:
  """The options as a Markdown table (docs/architecture.md holds it)."""
  rows = ['| option | default | config.model | timm | transformers | what it does |',
          '|---|---|---|---|---|---|']
  for o in OPTIONS:
    config = 'preset' if o.config is UNSET else repr(o.config)
    rows.append(f'| `{o.name}` | `{o.default!r}` | {config} | {o.timm or "-"} | '
                f'{o.hf or "-"} | {o.doc} |')
  return '\n'.join(rows)
