"""timm VisionTransformer state dicts <-> the vit_jax parameter tree (numpy only).

Names and layouts follow timm's own reader of the published .npz files
(`timm.models.vision_transformer._load_weights`): Linen kernels (in, out) are
torch weights (out, in), conv kernels (h, w, in, out) are (out, in, h, w), the
query/key/value projections are one fused `attn.qkv`, and the hybrid's BiT
ResNet lives under `patch_embed.backbone` (`stem`, `stages.{i}.blocks.{j}`).
timm's ViT has no pre-logits layer (only timm < 0.6 had `pre_logits.fc`,
which is read) and a state dict does not record the number of heads.
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
    (r'(^|\.)reg_token$', 'register tokens'),
    (r'\.ls[12]\.', 'layer scale (init_values)'),
    (r'\.(q_norm|k_norm)\.', 'query/key normalisation (qk_norm)'),
    (r'(^|\.)norm_pre\.', 'a LayerNorm before the blocks (pre_norm, CLIP style)'),
    (r'(^|\.)attn_pool\.', "attention pooling (global_pool='map')"),
    (r'(dist_token|head_dist)', 'a distillation token (DeiT)'),
    (r'patch_embed\.norm\.', 'a norm inside the patch embedding'),
    (r'\.attn\.norm\.|\.mlp\.norm\.', 'a norm inside attention/MLP (scale_norm)'),
    (r'(^|\.)mask_token$', 'a mask token'),
)


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
    if what and re.search(pattern, key):
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


def to_params(state: Mapping[str, np.ndarray], num_heads: int,
              source: str) -> Params:
  """A timm ViT (or R+ViT hybrid) state dict -> the vit_jax params tree."""
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
  hd = width // num_heads
  out['embedding'] = {'kernel': _conv(w),
                      'bias': r.pop_optional('patch_embed.proj.bias', (width,))}
  posemb = r.pop('pos_embed')
  if posemb.ndim != 3 or posemb.shape[0] != 1 or posemb.shape[2] != width:
    raise ValueError(f'Checkpoint {source} key \'pos_embed\' has shape '
                     f'{posemb.shape}, expected (1, tokens, {width}).')
  if r.has('cls_token'):
    out['cls'] = r.pop('cls_token', (1, 1, width))
    tokens = posemb.shape[1]
    if round(np.sqrt(tokens)) ** 2 == tokens:
      # no_embed_class: the class token gets no position embedding; a zero
      # row for it is the same map.
      posemb = np.concatenate([np.zeros((1, 1, width), posemb.dtype), posemb], 1)
  encoder: Params = {'posembed_input': {'pos_embedding': posemb}}
  layers = _block_count(r.state, r'blocks\.(\d+)\.')
  if not layers:
    raise ValueError(f'Checkpoint {source} has no blocks.N entries; it is not a '
                     'timm ViT state dict.')
  for i in range(layers):
    b = f'blocks.{i}.'
    qkv = r.pop(b + 'attn.qkv.weight', (3 * width, width))
    qkv_b = r.pop_optional(b + 'attn.qkv.bias', (3 * width,))
    attn = {}
    for j, name in enumerate(('query', 'key', 'value')):
      attn[name] = {
          'kernel': np.ascontiguousarray(
              qkv[j * width:(j + 1) * width].T.reshape(width, num_heads, hd)),
          'bias': qkv_b[j * width:(j + 1) * width].reshape(num_heads, hd)}
    proj = r.pop(b + 'attn.proj.weight', (width, width))
    attn['out'] = {'kernel': np.ascontiguousarray(
        proj.T.reshape(num_heads, hd, width)),
                   'bias': r.pop_optional(b + 'attn.proj.bias', (width,))}
    fc1 = r.pop(b + 'mlp.fc1.weight')
    if fc1.ndim != 2 or fc1.shape[1] != width:
      raise ValueError(f'Checkpoint {source} key {b + "mlp.fc1.weight"!r} has '
                       f'shape {fc1.shape}, expected (mlp_dim, {width}).')
    mlp = fc1.shape[0]
    encoder[f'encoderblock_{i}'] = {
        'LayerNorm_0': {'scale': r.pop(b + 'norm1.weight', (width,)),
                        'bias': r.pop(b + 'norm1.bias', (width,))},
        'MultiHeadDotProductAttention_0': attn,
        'LayerNorm_1': {'scale': r.pop(b + 'norm2.weight', (width,)),
                        'bias': r.pop(b + 'norm2.bias', (width,))},
        'MlpBlock_0': {
            'Dense_0': {'kernel': _dense_t(fc1),
                        'bias': r.pop(b + 'mlp.fc1.bias', (mlp,))},
            'Dense_1': {'kernel': _dense_t(r.pop(b + 'mlp.fc2.weight', (width, mlp))),
                        'bias': r.pop(b + 'mlp.fc2.bias', (width,))},
        },
    }
  if r.has('norm.weight') == r.has('fc_norm.weight'):
    raise ValueError(f'Checkpoint {source} has {"both" if r.has("norm.weight") else "neither"} '
                     'a final norm (norm.weight) and a norm after pooling (fc_norm.weight); '
                     'vit_jax ViTs have exactly one of them.')
  if r.has('norm.weight'):
    encoder['encoder_norm'] = {'scale': r.pop('norm.weight', (width,)),
                               'bias': r.pop('norm.bias', (width,))}
  else:  # timm fc_norm=True (MAE / BEiT fine-tuning): the norm follows the pooling
    out['fc_norm'] = {'scale': r.pop('fc_norm.weight', (width,)),
                      'bias': r.pop('fc_norm.bias', (width,))}
  out['Transformer'] = encoder
  features = width
  if r.has('pre_logits.fc.weight'):
    w = r.pop('pre_logits.fc.weight')
    out['pre_logits'] = {'kernel': _dense_t(w),
                         'bias': r.pop('pre_logits.fc.bias', (w.shape[0],))}
    features = w.shape[0]
  if r.has('head.weight'):
    w = r.pop('head.weight')
    if w.ndim != 2 or w.shape[1] != features:
      raise ValueError(f'Checkpoint {source} key \'head.weight\' has shape '
                       f'{w.shape}, expected (classes, {features}).')
    out['head'] = {'kernel': _dense_t(w),
                   'bias': r.pop('head.bias', (w.shape[0],))}
  r.finish()
  return out


def from_params(params: Mapping[str, Any], source: str) -> dict[str, np.ndarray]:
  """The vit_jax params tree of a ViT or hybrid -> a timm VisionTransformer state dict."""
  if 'stem' in params:
    raise ValueError(f'Checkpoint {source} is an MLP-Mixer; the timm format '
                     'here covers ViT and R+ViT hybrids only.')
  if 'pre_logits' in params:
    raise ValueError(f'Checkpoint {source} has a pre-logits layer '
                     '(representation_size), which timm\'s VisionTransformer '
                     'does not have; pass --drop_head to write the backbone '
                     'without pre_logits and head (what timm does with the '
                     'published ImageNet-21k files).')
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
  out['patch_embed.proj.bias'] = g(params, 'embedding', 'bias')
  if 'cls' in params:
    out['cls_token'] = g(params, 'cls')
  enc = _get(params, ('Transformer',), source)
  out['pos_embed'] = g(enc, 'posembed_input', 'pos_embedding')
  i = 0
  while f'encoderblock_{i}' in enc:
    blk = enc[f'encoderblock_{i}']
    b = f'blocks.{i}.'
    attn = _get(blk, ('MultiHeadDotProductAttention_0',), source)
    q = g(attn, 'query', 'kernel')
    width = q.shape[0]
    out[b + 'norm1.weight'] = g(blk, 'LayerNorm_0', 'scale')
    out[b + 'norm1.bias'] = g(blk, 'LayerNorm_0', 'bias')
    out[b + 'attn.qkv.weight'] = np.ascontiguousarray(np.concatenate(
        [g(attn, n, 'kernel').reshape(width, -1).T
         for n in ('query', 'key', 'value')]))
    out[b + 'attn.qkv.bias'] = np.concatenate(
        [g(attn, n, 'bias').reshape(-1) for n in ('query', 'key', 'value')])
    out[b + 'attn.proj.weight'] = np.ascontiguousarray(
        g(attn, 'out', 'kernel').reshape(-1, width).T)
    out[b + 'attn.proj.bias'] = g(attn, 'out', 'bias')
    out[b + 'norm2.weight'] = g(blk, 'LayerNorm_1', 'scale')
    out[b + 'norm2.bias'] = g(blk, 'LayerNorm_1', 'bias')
    for n in (0, 1):
      out[f'{b}mlp.fc{n + 1}.weight'] = _dense_t(g(blk, 'MlpBlock_0', f'Dense_{n}', 'kernel'))
      out[f'{b}mlp.fc{n + 1}.bias'] = g(blk, 'MlpBlock_0', f'Dense_{n}', 'bias')
    i += 1
  # The final norm on the tokens (norm), or after pooling (fc_norm=True).
  name, tree, key = (('fc_norm', params, 'fc_norm') if 'fc_norm' in params else
                     ('norm', enc, 'encoder_norm'))
  out[f'{name}.weight'] = g(tree, key, 'scale')
  out[f'{name}.bias'] = g(tree, key, 'bias')
  if 'head' in params:
    out['head.weight'] = _dense_t(g(params, 'head', 'kernel'))
    out['head.bias'] = g(params, 'head', 'bias')
  return out


def _get(tree: Mapping[str, Any], path: tuple, source: str) -> Any:
  node = tree
  for key in path:
    if not isinstance(node, Mapping) or key not in node:
      raise ValueError(f'Checkpoint {source} lacks {"/".join(path)!r}; it is not '
                       'a vit_jax ViT parameter tree.')
    node = node[key]
  return node
