"""timm VisionTransformer state dicts <-> the vit_jax parameter tree (numpy only).

Names and layouts follow timm's own reader of the published .npz files
(`timm.models.vision_transformer._load_weights`): Linen kernels (in, out) are
torch weights (out, in), conv kernels (h, w, in, out) are (out, in, h, w), the
query/key/value projections are one fused `attn.qkv`, and the hybrid's BiT
ResNet lives under `patch_embed.backbone` (`stem`, `stages.{i}.blocks.{j}`).
timm's ViT has no pre-logits layer (only timm < 0.6 had `pre_logits.fc`,
which is read). The variants map one to one: `reg_token` -> registers,
`dist_token`/`head_dist` (DeiT) -> dist_token/head_dist, `ls{1,2}.gamma` ->
LayerScale_{0,1}, `attn.{q,k}_norm` -> query_norm/key_norm, `norm_pre` ->
Transformer/pre_norm, `attn_pool` (AttentionPoolLatent) -> MAPHead_0, packed
SwiGLU `mlp.fc1` = [gate; value]. A state dict does not record the number of
heads, the activation, the LayerNorm epsilon or the pooling: they come from the
timm model name (`name_options`) or the caller.
"""
import re
from typing import Any, Mapping, Optional

import numpy as np

from vit_jax.models.formats import state as state_lib

Params = dict[str, Any]

# timm architectures (name without resolution and tag) that are a vit_jax
# preset: same layout, same head count. Others need num_heads.
TIMM_PRESETS = {
    'vit_tiny_patch16': 'ViT-Ti_16',
    'vit_small_patch16': 'ViT-S_16',
    'vit_small_patch32': 'ViT-S_32',
    'vit_base_patch8': 'ViT-B_8',
    'vit_base_patch16': 'ViT-B_16',
    'vit_base_patch32': 'ViT-B_32',
    'vit_large_patch16': 'ViT-L_16',
    'vit_large_patch32': 'ViT-L_32',
    'vit_huge_patch14': 'ViT-H_14',
    'vit_tiny_r_s16_p8': 'R+ViT-Ti_16',
    'vit_small_r26_s32': 'R26+ViT-S_32',
    'vit_base_r26_s32': 'R26+ViT-B_32',
    'vit_base_r50_s16': 'R50+ViT-B_16',
    'vit_large_r50_s32': 'R50+ViT-L_32',
}

# timm features the vit_jax ViT has no counterpart for: key pattern -> what.
_UNSUPPORTED = (
    (r'patch_embed\.norm\.', 'a norm inside the patch embedding'),
    (r'\.attn\.norm\.', 'a norm inside attention (scale_attn_norm)'),
    (r'(^|\.)mask_token$', 'a mask token'),
    (r'(^|\.)attn_pool\.(q_norm|k_norm)\.', 'a MAP head with qk_norm'),
)

# timm size names: (width, heads). A state dict records the width, not the heads.
_SIZES = {
    'tiny': (192, 3), 'small': (384, 6), 'medium': (512, 8), 'base': (768, 12),
    'large': (1024, 16), 'huge': (1280, 16), 'giant': (1408, 16),
    'gigantic': (1664, 16), 'so150m': (880, 16), 'so400m': (1152, 16),
}
# Names whose size breaks the table above.
_SIZE_EXCEPTIONS = {'vit_giant_patch14_dinov2': (1536, 24),
                    'vit_giant_patch14_reg4_dinov2': (1536, 24)}
OPTION_KEYS = ('activation', 'layer_norm_epsilon', 'classifier', 'class_token',
               'no_embed_class')


def base_name(timm_name: str) -> str:
  """A timm model name without its pretrained tag ('.augreg_in21k')."""
  return timm_name.split('.', 1)[0]


def name_options(timm_name: str) -> Optional[dict]:
  """What a timm model name implies that its state dict does not record, or None if no ViT name.

  Keys: num_heads, width (to check the file), activation and layer_norm_epsilon
  (timm's defaults: exact GELU, 1e-6; CLIP 1e-5, quick_gelu; SigLIP tanh-GELU),
  and no_embed_class where the name fixes it.
  """
  base = base_name(timm_name)
  m = re.match(r'(vit|deit3?|deit)_([a-z0-9]+?)_(?:distilled_)?(?:r\d+_s\d+_)?patch(\d+)', base)
  if not m:
    m = re.match(r'(deit)_([a-z]+)_distilled_patch(\d+)', base)
  if not m:
    return None
  size = m.group(2)
  arch = re.sub(r'_\d+$', '', base)
  width, heads = _SIZE_EXCEPTIONS.get(arch, _SIZES.get(size, (None, None)))
  if heads is None:
    return None
  out = {'num_heads': heads, 'width': width, 'activation': 'gelu',
         'layer_norm_epsilon': 1e-6}
  if 'quickgelu' in base:
    out['activation'] = 'quick_gelu'
  elif 'siglip' in base:
    out['activation'] = 'gelu_tanh'
  if '_clip_' in base or base.endswith('_clip'):
    out['layer_norm_epsilon'] = 1e-5
  if re.search(r'_reg\d+_', base) or m.group(1) == 'deit3':
    out['no_embed_class'] = True  # DINOv2-reg, DeiT-III: prefix tokens get no posemb
  elif 'dinov2' in base or m.group(1) == 'deit':
    out['no_embed_class'] = False
  if '_gap' in base:
    out['classifier'] = 'gap'
  return out


def config_model(config: Mapping[str, Any]) -> tuple[Optional[str], Optional[int]]:
  """(timm model name, head count) from timm's config.json ({} gives (None, None)).

  Its `model_args` (what timm.create_model was given beyond the name) override the
  name's sizes: a head count there wins, and the name is then not checked.
  """
  heads = (config.get('model_args') or {}).get('num_heads')
  if isinstance(heads, int):
    return None, heads
  name = config.get('architecture')
  return (name if isinstance(name, str) and name else None), None


def unsupported_family(keys) -> Optional[str]:
  """The features vit_jax lacks that mark a state dict as no timm VisionTransformer, if any.

  BEiT and timm's Eva class (EVA02, the `vit_*_rope_*` models) save other names
  than VisionTransformer; their position encodings (relative bias tables, 2D
  RoPE, which has no tensor at all) are what the vit_jax ViT does not have.
  """
  keys = list(keys)
  has = lambda pattern: any(re.search(pattern, k) for k in keys)  # noqa: E731
  if has(r'relative_position_bias_table|(^|\.)rel_pos_bias\.'):
    return 'relative position bias (BEiT)'
  if has(r'\.attn\.(q_bias|v_bias|q_proj\.weight)$'):
    features = ['2D rotary position embedding (RoPE)']
    if has(r'\.mlp\.fc1_g\.weight$'):
      features.append('SwiGLU with a norm inside the MLP')
    return ' and '.join(features) + " (timm's Eva class: EVA02, vit_*_rope_*)"
  return None


def preset_for(timm_name: str) -> Optional[str]:
  """The vit_jax preset of a timm model name (e.g. 'vit_base_patch16_224.augreg_in21k'), if any."""
  base = timm_name.split('.', 1)[0]
  base = re.sub(r'_\d+(_in21k|_miil)?$', '', base)
  return TIMM_PRESETS.get(base)


def _why_unsupported(key: str) -> str:
  for pattern, what in _UNSUPPORTED:
    if re.search(pattern, key):
      return what
  return 'a parameter of no ViT layer vit_jax knows'


def _conv(w: np.ndarray) -> np.ndarray:
  """torch conv weight (out, in, h, w) -> flax kernel (h, w, in, out)."""
  return np.ascontiguousarray(w.transpose(2, 3, 1, 0))


def _conv_t(k: np.ndarray) -> np.ndarray:
  """flax conv kernel (h, w, in, out) -> torch weight (out, in, h, w)."""
  return np.ascontiguousarray(k.transpose(3, 2, 0, 1))


def _dense_t(k: np.ndarray) -> np.ndarray:
  return np.ascontiguousarray(k.T)


def _reader(state: Mapping[str, np.ndarray], source: str) -> state_lib.StateReader:
  return state_lib.StateReader(
      state, source,
      missing='it is not a timm VisionTransformer state dict vit_jax can read.',
      mismatch=', expected {shape}; the state dict is inconsistent or not a timm ViT.',
      leftover=lambda key: (f': {_why_unsupported(key)}, which the vit_jax ViT does '
                            'not have'))


def _block_count(state: Mapping[str, Any], pattern: str) -> int:
  indices = {int(m.group(1)) for k in state for m in [re.match(pattern, k)] if m}
  if indices and indices != set(range(len(indices))):
    raise ValueError(f'Block numbering {sorted(indices)} has gaps.')
  return len(indices)


def _read_resnet(r: state_lib.StateReader, p: str, out: Params) -> None:
  """Hybrid BiT stem/stages under prefix `p` -> conv_root, gn_root, block{i}/unit{j}."""
  stem = p + 'stem.' if r.has(p + 'stem.conv.weight') else p
  out['conv_root'] = {'kernel': _conv(r.pop(stem + 'conv.weight'))}
  out['gn_root'] = {'scale': r.pop(stem + 'norm.weight'),
                    'bias': r.pop(stem + 'norm.bias')}
  stages = _block_count(r.state, re.escape(p) + r'stages\.(\d+)\.')
  for i in range(stages):
    units = _block_count(r.state, re.escape(p) + rf'stages\.{i}\.blocks\.(\d+)\.')
    for j in range(units):
      bp = f'{p}stages.{i}.blocks.{j}.'
      unit = {}
      for n in (1, 2, 3):
        unit[f'conv{n}'] = {'kernel': _conv(r.pop(f'{bp}conv{n}.weight'))}
        unit[f'gn{n}'] = {'scale': r.pop(f'{bp}norm{n}.weight'),
                          'bias': r.pop(f'{bp}norm{n}.bias')}
      if r.has(bp + 'downsample.conv.weight'):
        unit['conv_proj'] = {'kernel': _conv(r.pop(bp + 'downsample.conv.weight'))}
        unit['gn_proj'] = {'scale': r.pop(bp + 'downsample.norm.weight'),
                           'bias': r.pop(bp + 'downsample.norm.bias')}
      out.setdefault(f'block{i + 1}', {})[f'unit{j + 1}'] = unit


def _ln(r: state_lib.StateReader, key: str, width: int) -> Params:
  return {'scale': r.pop(key + '.weight', (width,)), 'bias': r.pop(key + '.bias', (width,))}


def heads_of(state: Mapping[str, np.ndarray]) -> Optional[int]:
  """The head count a state dict implies (its qk_norm widths are head_dim), if any."""
  norm, proj = state.get('blocks.0.attn.q_norm.weight'), state.get('patch_embed.proj.weight')
  if norm is None or proj is None or norm.ndim != 1 or proj.shape[0] % norm.shape[0]:
    return None
  return proj.shape[0] // norm.shape[0]


def _heads_in(w: np.ndarray, b: Optional[np.ndarray], width: int, heads: int) -> Params:
  """A torch Linear (heads * hd, width) -> our per-head projection (width, heads, hd)."""
  out = {'kernel': np.ascontiguousarray(w.T.reshape(width, heads, -1))}
  if b is not None:
    out['bias'] = b.reshape(heads, -1)
  return out


def _heads_out(w: np.ndarray, b: np.ndarray, width: int, heads: int) -> Params:
  return {'kernel': np.ascontiguousarray(w.T.reshape(heads, -1, width)), 'bias': b}


def _dense(r: state_lib.StateReader, key: str, shape: Optional[tuple] = None) -> Params:
  w = r.pop(key + '.weight', shape)
  return {'kernel': _dense_t(w), 'bias': r.pop(key + '.bias', (w.shape[0],))}


def _mlp(r: state_lib.StateReader, b: str, width: int) -> Params:
  """fc1/fc2 (Mlp), packed SwiGLU (GluMlp: fc1 = [gate; value]) or SwiGLU (fc1_g, fc1_x)."""
  if r.has(b + 'fc1_g.weight'):
    out = {'gate': _dense(r, b + 'fc1_g'), 'value': _dense(r, b + 'fc1_x')}
  else:
    fc1 = r.pop(b + 'fc1.weight')
    if fc1.ndim != 2 or fc1.shape[1] != width:
      raise ValueError(f'Checkpoint {r.source} key {b + "fc1.weight"!r} has shape '
                       f'{fc1.shape}, expected (mlp_dim, {width}).')
    bias = r.pop(b + 'fc1.bias', (fc1.shape[0],))
    fc2 = r.state.get(b + 'fc2.weight')
    if fc2 is not None and fc2.ndim == 2 and fc2.shape[1] * 2 == fc1.shape[0]:
      h = fc2.shape[1]  # timm GluMlp (SwiGLUPacked): silu(first half) * second half
      out = {'gate': {'kernel': _dense_t(fc1[:h]), 'bias': bias[:h]},
             'value': {'kernel': _dense_t(fc1[h:]), 'bias': bias[h:]}}
    else:
      out = {'Dense_0': {'kernel': _dense_t(fc1), 'bias': bias}}
  hidden = out.get('gate', out.get('Dense_0'))['kernel'].shape[1]
  if r.has(b + 'norm.weight'):
    out['norm'] = _ln(r, b + 'norm', hidden)
  out['out' if 'gate' in out else 'Dense_1'] = _dense(r, b + 'fc2', (width, hidden))
  return out


def _block(r: state_lib.StateReader, b: str, width: int, heads: int) -> Params:
  qkv = r.pop(b + 'attn.qkv.weight', (3 * width, width))
  qkv_b = r.pop(b + 'attn.qkv.bias', (3 * width,)) if r.has(b + 'attn.qkv.bias') else None
  attn = {}
  for j, name in enumerate(('query', 'key', 'value')):
    rows = slice(j * width, (j + 1) * width)
    attn[name] = _heads_in(qkv[rows], None if qkv_b is None else qkv_b[rows], width, heads)
  hd = width // heads
  if r.has(b + 'attn.q_norm.weight') and heads_of(r.state) not in (None, heads):
    raise ValueError(f'Checkpoint {r.source}: its qk_norm is {heads_of(r.state)} heads '
                     f'wide, not {heads}; pass the --model (or --num_heads) it was '
                     'trained with.')
  if r.has(b + 'attn.q_norm.weight'):
    attn['query_norm'] = _ln(r, b + 'attn.q_norm', hd)
    attn['key_norm'] = _ln(r, b + 'attn.k_norm', hd)
  attn['out'] = _heads_out(r.pop(b + 'attn.proj.weight', (width, width)),
                           r.pop_optional(b + 'attn.proj.bias', (width,)), width, heads)
  out = {'LayerNorm_0': _ln(r, b + 'norm1', width),
         'MultiHeadDotProductAttention_0': attn,
         'LayerNorm_1': _ln(r, b + 'norm2', width),
         'MlpBlock_0': _mlp(r, b + 'mlp.', width)}
  for n in (1, 2):
    if r.has(f'{b}ls{n}.gamma'):
      out[f'LayerScale_{n - 1}'] = {'scale': r.pop(f'{b}ls{n}.gamma', (width,))}
  return out


def _map_head(r: state_lib.StateReader, width: int, heads: int) -> Params:
  """timm's AttentionPoolLatent (global_pool='map') -> big_vision's MAPHead_0."""
  p = 'attn_pool.'
  latent = r.pop(p + 'latent')
  if latent.shape != (1, 1, width):
    raise ValueError(f'Checkpoint {r.source} key {p + "latent"!r} has shape '
                     f'{latent.shape}: vit_jax MAP heads have one latent (1, 1, {width}).')
  kv = r.pop(p + 'kv.weight', (2 * width, width))
  kv_b = r.pop(p + 'kv.bias', (2 * width,))
  attn = {'query': _heads_in(r.pop(p + 'q.weight', (width, width)),
                             r.pop(p + 'q.bias', (width,)), width, heads),
          'key': _heads_in(kv[:width], kv_b[:width], width, heads),
          'value': _heads_in(kv[width:], kv_b[width:], width, heads),
          'out': _heads_out(r.pop(p + 'proj.weight', (width, width)),
                            r.pop(p + 'proj.bias', (width,)), width, heads)}
  return {'probe': latent, 'MultiHeadDotProductAttention_0': attn,
          'LayerNorm_0': _ln(r, p + 'norm', width),
          'MlpBlock_0': _mlp(r, p + 'mlp.', width)}


def to_params(state: Mapping[str, np.ndarray], num_heads: int,
              source: str, no_embed_class: Optional[bool] = None) -> Params:
  """A timm ViT (or R+ViT hybrid, or DeiT) state dict -> the vit_jax params tree.

  `no_embed_class` says whether the position embedding skips the prefix tokens
  (the state dict does not say; None: whichever leaves a square grid).
  """
  foreign = unsupported_family(state)
  if foreign:
    raise ValueError(f'Checkpoint {source} has {foreign}, which the vit_jax ViT does '
                     'not support yet; convert a timm VisionTransformer (vit_*) instead.')
  r = _reader(state, source)
  out: Params = {}
  if r.has('patch_embed.backbone.stem.conv.weight') or r.has(
      'patch_embed.backbone.conv.weight'):
    _read_resnet(r, 'patch_embed.backbone.', out)
  w = r.pop('patch_embed.proj.weight')
  if w.ndim != 4:
    raise ValueError(f'Checkpoint {source} key \'patch_embed.proj.weight\' has '
                     f'shape {w.shape}, not a conv weight (out, in, h, w).')
  width = w.shape[0]
  if width % num_heads:
    raise ValueError(f'Checkpoint {source}: width {width} is not divisible by '
                     f'{num_heads} heads; pass the --model (or --num_heads) it '
                     'was trained with.')
  pre_norm = r.has('norm_pre.weight')
  out['embedding'] = {'kernel': _conv(w)}
  if r.has('patch_embed.proj.bias') or not pre_norm:  # CLIP's has none
    out['embedding']['bias'] = r.pop_optional('patch_embed.proj.bias', (width,))
  prefix = 0
  for key, name in (('cls_token', 'cls'), ('dist_token', 'dist_token'),
                    ('reg_token', 'registers')):
    if r.has(key):
      out[name] = r.pop(key)
      if out[name].ndim != 3 or out[name].shape[::2] != (1, width):
        raise ValueError(f'Checkpoint {source} key {key!r} has shape '
                         f'{out[name].shape}, expected (1, tokens, {width}).')
      prefix += out[name].shape[1]
  posemb = r.pop('pos_embed')
  if posemb.ndim != 3 or posemb.shape[0] != 1 or posemb.shape[2] != width:
    raise ValueError(f'Checkpoint {source} key \'pos_embed\' has shape '
                     f'{posemb.shape}, expected (1, tokens, {width}).')
  tokens = posemb.shape[1]
  if no_embed_class is None:
    no_embed_class = bool(prefix) and _square(tokens) and not _square(tokens - prefix)
  if not no_embed_class and tokens <= prefix:
    raise ValueError(f'Checkpoint {source}: pos_embed has {tokens} rows for {prefix} '
                     'prefix tokens and the patches.')
  encoder: Params = {'posembed_input': {'pos_embedding': posemb}}
  if pre_norm:
    encoder['pre_norm'] = _ln(r, 'norm_pre', width)
  layers = _block_count(r.state, r'blocks\.(\d+)\.')
  if not layers:
    raise ValueError(f'Checkpoint {source} has no blocks.N entries; it is not a '
                     'timm ViT state dict.')
  for i in range(layers):
    encoder[f'encoderblock_{i}'] = _block(r, f'blocks.{i}.', width, num_heads)
  if r.has('norm.weight') and r.has('fc_norm.weight'):
    raise ValueError(f'Checkpoint {source} has both a final norm (norm.weight) and a '
                     'norm after pooling (fc_norm.weight); vit_jax ViTs have one of them.')
  if r.has('norm.weight'):
    encoder['encoder_norm'] = _ln(r, 'norm', width)
  elif r.has('fc_norm.weight'):  # timm fc_norm=True (MAE / BEiT fine-tuning)
    out['fc_norm'] = _ln(r, 'fc_norm', width)
  else:
    raise ValueError(f'Checkpoint {source} has neither a final norm (norm.weight) nor '
                     'a norm after pooling (fc_norm.weight); vit_jax ViTs have one of them.')
  out['Transformer'] = encoder
  if r.has('attn_pool.latent'):
    out['MAPHead_0'] = _map_head(r, width, num_heads)
  features = width
  if r.has('pre_logits.fc.weight'):
    out['pre_logits'] = _dense(r, 'pre_logits.fc')
    features = out['pre_logits']['kernel'].shape[1]
  for key, name in (('head', 'head'), ('head_dist', 'head_dist')):
    if r.has(key + '.weight'):
      w = r.state[key + '.weight']
      if w.ndim != 2 or w.shape[1] != features:
        raise ValueError(f'Checkpoint {source} key {key + ".weight"!r} has shape '
                         f'{w.shape}, expected (classes, {features}).')
      out[name] = _dense(r, key)
  r.finish()
  return out


def _square(n: int) -> bool:
  return n > 0 and round(np.sqrt(n)) ** 2 == n


def _ln_t(tree: Mapping[str, Any], prefix: str, out: dict) -> None:
  out[prefix + '.weight'] = np.asarray(tree['scale'], np.float32)
  out[prefix + '.bias'] = np.asarray(tree['bias'], np.float32)


def _dense_to(tree: Mapping[str, Any], prefix: str, out: dict) -> None:
  out[prefix + '.weight'] = _dense_t(np.asarray(tree['kernel'], np.float32))
  out[prefix + '.bias'] = np.asarray(tree['bias'], np.float32)


def _heads_in_t(tree: Mapping[str, Any]) -> np.ndarray:
  k = np.asarray(tree['kernel'], np.float32)
  return np.ascontiguousarray(k.reshape(k.shape[0], -1).T)


def _mlp_to(mlp: Mapping[str, Any], b: str, out: dict) -> None:
  if 'gate' in mlp:  # written as timm's packed SwiGLU (GluMlp)
    out[b + 'fc1.weight'] = np.concatenate([_heads_in_t(mlp['gate']),
                                            _heads_in_t(mlp['value'])])
    out[b + 'fc1.bias'] = np.concatenate([np.asarray(mlp['gate']['bias'], np.float32),
                                          np.asarray(mlp['value']['bias'], np.float32)])
  else:
    _dense_to(mlp['Dense_0'], b + 'fc1', out)
  if 'norm' in mlp:
    _ln_t(mlp['norm'], b + 'norm', out)
  _dense_to(mlp['out' if 'gate' in mlp else 'Dense_1'], b + 'fc2', out)


def _attn_to(attn: Mapping[str, Any], b: str, out: dict) -> None:
  out[b + 'qkv.weight'] = np.ascontiguousarray(np.concatenate(
      [_heads_in_t(attn[n]) for n in ('query', 'key', 'value')]))
  if 'bias' in attn['query']:
    out[b + 'qkv.bias'] = np.concatenate(
        [np.asarray(attn[n]['bias'], np.float32).reshape(-1)
         for n in ('query', 'key', 'value')])
  if 'query_norm' in attn:
    _ln_t(attn['query_norm'], b + 'q_norm', out)
    _ln_t(attn['key_norm'], b + 'k_norm', out)
  o = np.asarray(attn['out']['kernel'], np.float32)
  out[b + 'proj.weight'] = np.ascontiguousarray(o.reshape(-1, o.shape[-1]).T)
  out[b + 'proj.bias'] = np.asarray(attn['out']['bias'], np.float32)


def from_params(params: Mapping[str, Any], source: str) -> dict[str, np.ndarray]:
  """The vit_jax params tree of a ViT (any variant) or hybrid -> a timm state dict."""
  if 'pre_logits' in params:
    raise ValueError(f'Checkpoint {source} has a pre-logits layer '
                     '(representation_size), which timm\'s VisionTransformer '
                     'does not have; pass --drop_head to write the backbone '
                     'without pre_logits and head (what timm does with the '
                     'published ImageNet-21k files).')
  if 'dist_token' in params and 'registers' in params:
    raise ValueError(f'Checkpoint {source} has a distillation token and register '
                     "tokens, which no timm model has together (timm's DeiT has no "
                     'registers).')
  g = lambda tree, *path: np.asarray(_get(tree, path, source), np.float32)  # noqa: E731
  out: dict[str, np.ndarray] = {}
  if 'conv_root' in params:
    p = 'patch_embed.backbone.'
    stem = p + 'stem.' if any(k.startswith('block') for k in params) else p
    out[stem + 'conv.weight'] = _conv_t(g(params, 'conv_root', 'kernel'))
    out[stem + 'norm.weight'] = g(params, 'gn_root', 'scale').reshape(-1)
    out[stem + 'norm.bias'] = g(params, 'gn_root', 'bias').reshape(-1)
    i = 1
    while f'block{i}' in params:
      block = params[f'block{i}']
      j = 1
      while f'unit{j}' in block:
        unit = block[f'unit{j}']
        bp = f'{p}stages.{i - 1}.blocks.{j - 1}.'
        for n in (1, 2, 3):
          out[f'{bp}conv{n}.weight'] = _conv_t(g(unit, f'conv{n}', 'kernel'))
          out[f'{bp}norm{n}.weight'] = g(unit, f'gn{n}', 'scale').reshape(-1)
          out[f'{bp}norm{n}.bias'] = g(unit, f'gn{n}', 'bias').reshape(-1)
        if 'conv_proj' in unit:
          out[bp + 'downsample.conv.weight'] = _conv_t(g(unit, 'conv_proj', 'kernel'))
          out[bp + 'downsample.norm.weight'] = g(unit, 'gn_proj', 'scale').reshape(-1)
          out[bp + 'downsample.norm.bias'] = g(unit, 'gn_proj', 'bias').reshape(-1)
        j += 1
      i += 1
  out['patch_embed.proj.weight'] = _conv_t(g(params, 'embedding', 'kernel'))
  if 'bias' in params['embedding']:
    out['patch_embed.proj.bias'] = g(params, 'embedding', 'bias')
  for name, key in (('cls', 'cls_token'), ('dist_token', 'dist_token'),
                    ('registers', 'reg_token')):
    if name in params:
      out[key] = g(params, name)
  enc = _get(params, ('Transformer',), source)
  out['pos_embed'] = g(enc, 'posembed_input', 'pos_embedding')
  if 'pre_norm' in enc:
    _ln_t(enc['pre_norm'], 'norm_pre', out)
  i = 0
  while f'encoderblock_{i}' in enc:
    blk = enc[f'encoderblock_{i}']
    b = f'blocks.{i}.'
    _ln_t(_get(blk, ('LayerNorm_0',), source), b + 'norm1', out)
    _attn_to(_get(blk, ('MultiHeadDotProductAttention_0',), source), b + 'attn.', out)
    _ln_t(_get(blk, ('LayerNorm_1',), source), b + 'norm2', out)
    _mlp_to(_get(blk, ('MlpBlock_0',), source), b + 'mlp.', out)
    for n in (0, 1):
      if f'LayerScale_{n}' in blk:
        out[f'{b}ls{n + 1}.gamma'] = g(blk, f'LayerScale_{n}', 'scale')
    i += 1
  # The final norm on the tokens (norm), or after pooling (fc_norm=True).
  if 'fc_norm' in params:
    _ln_t(params['fc_norm'], 'fc_norm', out)
  else:
    _ln_t(_get(enc, ('encoder_norm',), source), 'norm', out)
  if 'MAPHead_0' in params:
    head = params['MAPHead_0']
    p = 'attn_pool.'
    out[p + 'latent'] = g(head, 'probe')
    attn = head['MultiHeadDotProductAttention_0']
    out[p + 'q.weight'] = _heads_in_t(attn['query'])
    out[p + 'q.bias'] = g(attn, 'query', 'bias').reshape(-1)
    out[p + 'kv.weight'] = np.concatenate([_heads_in_t(attn['key']),
                                           _heads_in_t(attn['value'])])
    out[p + 'kv.bias'] = np.concatenate([g(attn, 'key', 'bias').reshape(-1),
                                         g(attn, 'value', 'bias').reshape(-1)])
    o = g(attn, 'out', 'kernel')
    out[p + 'proj.weight'] = np.ascontiguousarray(o.reshape(-1, o.shape[-1]).T)
    out[p + 'proj.bias'] = g(attn, 'out', 'bias')
    _ln_t(head['LayerNorm_0'], p + 'norm', out)
    _mlp_to(head['MlpBlock_0'], p + 'mlp.', out)
  for name in ('head', 'head_dist'):
    if name in params:
      _dense_to(params[name], name, out)
  return out


def _get(tree: Mapping[str, Any], path: tuple, source: str) -> Any:
  node = tree
  for key in path:
    if not isinstance(node, Mapping) or key not in node:
      raise ValueError(f'Checkpoint {source} lacks {"/".join(path)!r}; it is not '
                       'a vit_jax ViT parameter tree.')
    node = node[key]
  return node
