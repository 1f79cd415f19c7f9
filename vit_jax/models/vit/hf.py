"""Hugging Face `transformers` ViT-family checkpoints <-> the vit_jax parameter tree (numpy only).

Model types (config.json `model_type`) and the classes they cover:
  vit                    ViTModel (pooler = our `pre_logits`: dense + tanh on the
                         class token), ViTForImageClassification (`classifier` =
                         our `head`);
  vit_mae                ViTMAEModel / ViTMAEForPreTraining's encoder: mean of the
                         normed patch tokens (class_token=True, classifier='gap');
  deit                   DeiTForImageClassificationWithTeacher (distilled: two heads
                         averaged) and DeiTForImageClassification (class head only:
                         read as a distilled model whose distillation head is zero
                         and class head doubled, the same logits);
  dinov2, dinov2_with_registers
                         Dinov2Model / Dinov2WithRegistersModel (layer scale,
                         SwiGLU for giant; the pooled output is the normed class
                         token); the registers' model adds no position embedding
                         to them, read as no_embed_class with the class token's
                         row folded into it;
  clip_vision_model, clip
                         CLIPVisionModel (pre_layrnorm = pre_norm, no patch bias,
                         post_layernorm on the pooled class token = encoder_norm)
                         and CLIPVisionModelWithProjection (`visual_projection`,
                         bias-free, = a head with zero bias); a full CLIPModel's
                         vision tower;
  siglip_vision_model, siglip
                         SiglipVisionModel (MAP head `head` = MAPHead_0, no class
                         token); a full SiglipModel's vision tower.
`hidden_act` and `layer_norm_eps` are read as they are (exact GELU is exact GELU)
and written from the model's options. Keys are read in the Hub layout (what
`save_pretrained` writes) and, for ViT, in the transformers 5 module layout.
Image normalisation: vit_jax feeds pixels scaled to [-1, 1] (HF mean = std =
0.5); other `preprocessor_config.json` statistics are folded into the patch
embedding, which is linear.
"""
import re
from typing import Any, Mapping, Optional

from absl import logging
import numpy as np

from vit_jax.models.formats import state as state_lib

Params = dict[str, Any]

_ACTIVATIONS = {'gelu': 'gelu', 'gelu_pytorch_tanh': 'gelu_tanh', 'gelu_new': 'gelu_tanh',
                'gelu_fast': 'gelu_tanh', 'quick_gelu': 'quick_gelu'}
_HIDDEN_ACT = {'gelu': 'gelu', 'gelu_tanh': 'gelu_pytorch_tanh', 'quick_gelu': 'quick_gelu'}
# Per model type: the layer names, the class defaults config.json may leave out,
# and the name prefixes a task model nests the backbone under.
_VIT_NAMES = dict(layers='encoder.layer.', ln1='layernorm_before', ln2='layernorm_after',
                  q='attention.attention.query', k='attention.attention.key',
                  v='attention.attention.value', o='attention.output.dense',
                  fc1='intermediate.dense', fc2='output.dense', norm='layernorm')
_DINO_NAMES = dict(_VIT_NAMES, ln1='norm1', ln2='norm2', fc1='mlp.fc1', fc2='mlp.fc2')
_CLIP_NAMES = dict(layers='encoder.layers.', ln1='layer_norm1', ln2='layer_norm2',
                   q='self_attn.q_proj', k='self_attn.k_proj', v='self_attn.v_proj',
                   o='self_attn.out_proj', fc1='mlp.fc1', fc2='mlp.fc2',
                   norm='post_layernorm')
_TYPES = {
    'vit': dict(names=_VIT_NAMES, act='gelu', eps=1e-12, prefixes=('vit.',)),
    'vit_mae': dict(names=_VIT_NAMES, act='gelu', eps=1e-12, prefixes=('vit.',)),
    'deit': dict(names=_VIT_NAMES, act='gelu', eps=1e-12, prefixes=('deit.',)),
    'dinov2': dict(names=_DINO_NAMES, act='gelu', eps=1e-6, prefixes=('dinov2.',)),
    'dinov2_with_registers': dict(names=_DINO_NAMES, act='gelu', eps=1e-6,
                                  prefixes=('dinov2_with_registers.',)),
    'clip_vision_model': dict(names=_CLIP_NAMES, act='quick_gelu', eps=1e-5,
                              prefixes=('vision_model.',)),
    'siglip_vision_model': dict(names=_CLIP_NAMES, act='gelu_pytorch_tanh', eps=1e-6,
                                prefixes=('vision_model.',)),
}
_TOWERS = {'clip': 'clip_vision_model', 'siglip': 'siglip_vision_model'}
# Vision transformers of other model types: what vit_jax lacks to hold them.
_UNSUPPORTED_TYPES = {
    'beit': 'relative position bias (BEiT)',
    'data2vec-vision': 'relative position bias (Data2Vec-Vision, BEiT layout)',
}
# transformers 5 module names -> the Hub layout (ViT-style types only).
_V5_TO_HUB = (
    (r'(^|\.)layers\.(\d+)\.', r'\1encoder.layer.\2.'),
    (r'\.attention\.q_proj\.', '.attention.attention.query.'),
    (r'\.attention\.k_proj\.', '.attention.attention.key.'),
    (r'\.attention\.v_proj\.', '.attention.attention.value.'),
    (r'\.attention\.o_proj\.', '.attention.output.dense.'),
    (r'\.mlp\.fc1\.', '.intermediate.dense.'),
    (r'\.mlp\.fc2\.', '.output.dense.'),
)
# Keys of a full two-tower model that are not the vision tower.
_OTHER_TOWER = re.compile(r'^(text_model\.|text_projection\.|logit_scale$|logit_bias$)')


def _hub_names(state: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  out = {}
  for key, value in state.items():
    for pattern, repl in _V5_TO_HUB:
      key = re.sub(pattern, repl, key)
    out[key] = value
  return out


def looks_like_hf(keys) -> bool:
  """Whether state dict keys are those of a transformers ViT-family model (not timm's)."""
  return any(re.match(r'((vit|deit|dinov2\w*|vision_model)\.)?embeddings\.', k)
             for k in keys)


def _square(value: Any, what: str, source: str) -> int:
  if isinstance(value, (list, tuple)):
    if len(value) != 2 or value[0] != value[1]:
      raise ValueError(f'{source}: {what}={list(value)} is not square; vit_jax '
                       'converts square patches and images only.')
    value = value[0]
  return int(value)


def vision_config(config: Mapping[str, Any]) -> tuple[str, dict]:
  """(model type, config) of the vision model a config.json describes (a tower's own)."""
  model_type = config.get('model_type')
  if model_type in _TOWERS:
    return _TOWERS[model_type], dict(config.get('vision_config') or {})
  return model_type, dict(config)


def check_config(config: Mapping[str, Any], source: str) -> None:
  """Raises a one-line error for a config.json vit_jax cannot reproduce."""
  model_type, config = vision_config(config)
  if model_type in _UNSUPPORTED_TYPES:
    raise ValueError(f'{source} is a transformers {model_type!r} model with '
                     f'{_UNSUPPORTED_TYPES[model_type]}, which the vit_jax ViT does not '
                     'support yet.')
  if model_type not in _TYPES:
    raise ValueError(f'{source} is a transformers {model_type!r} model; vit_jax converts '
                     f'the model types {", ".join(sorted(_TYPES) + sorted(_TOWERS))}.')
  act = config.get('hidden_act', _TYPES[model_type]['act'])
  if act not in _ACTIVATIONS:
    raise ValueError(f'{source} has hidden_act={act!r}; vit_jax models run '
                     f'{", ".join(sorted(_ACTIVATIONS))}.')
  if int(config.get('num_channels', 3)) != 3:
    raise ValueError(f'{source} has num_channels={config["num_channels"]}; '
                     'vit_jax models take RGB images (3 channels).')
  if config.get('pooler_act', 'tanh') != 'tanh':
    raise ValueError(f'{source} has pooler_act={config["pooler_act"]!r}; the '
                     'vit_jax pre-logits layer is dense + tanh.')
  if model_type == 'siglip_vision_model' and not config.get('vision_use_head', True):
    raise ValueError(f'{source} is a SigLIP tower without its attention-pooling head '
                     '(vision_use_head=false), which vit_jax does not pool like.')
  _square(config.get('patch_size', 16), 'patch_size', source)


def options(config: Mapping[str, Any]) -> dict:
  """The vit_jax ViT options a (checked) config.json fixes beyond the weights' shapes."""
  model_type, config = vision_config(config)
  out = {'activation': _ACTIVATIONS[config.get('hidden_act', _TYPES[model_type]['act'])],
         'layer_norm_epsilon': float(config.get('layer_norm_eps',
                                                _TYPES[model_type]['eps']))}
  if model_type == 'vit_mae':
    out.update(classifier='gap', class_token=True)
  if model_type == 'dinov2_with_registers':
    out['no_embed_class'] = True
  if config.get('use_swiglu_ffn'):
    out['activation'] = 'swiglu'
  return out


def normalization(preprocessor: Optional[Mapping[str, Any]],
                  source: str) -> tuple[np.ndarray, np.ndarray]:
  """(scale, offset) per channel with x_hf = scale * x_ours + offset."""
  if preprocessor is None:
    return np.ones(3, np.float32), np.zeros(3, np.float32)
  s = 1.0
  if preprocessor.get('do_rescale', True):
    s = float(preprocessor.get('rescale_factor', 1 / 255))
  if preprocessor.get('do_normalize', True):
    mean = np.broadcast_to(np.asarray(preprocessor.get('image_mean', 0.5),
                                      np.float64), (3,))
    std = np.broadcast_to(np.asarray(preprocessor.get('image_std', 0.5),
                                     np.float64), (3,))
  else:
    mean, std = np.zeros(3), np.ones(3)
  if np.any(std <= 0):
    raise ValueError(f'{source} has image_std={list(std)}; it must be positive.')
  # Ours: x = P / 127.5 - 1 for pixels P in 0..255, so P = 127.5 (x + 1).
  scale = 127.5 * s / std
  offset = (127.5 * s - mean) / std
  return scale.astype(np.float32), offset.astype(np.float32)


def fold_normalization(params: Params, scale: np.ndarray,
                       offset: np.ndarray, posemb_prefix: int = 0) -> Params:
  """Makes the patch embedding take [-1, 1] pixels instead of HF-normalised ones.

  `posemb_prefix`: leading position-embedding rows that are not patches'.
  """
  if np.allclose(scale, 1, rtol=0, atol=1e-6) and np.allclose(offset, 0, atol=1e-6):
    return params
  kernel = params['embedding']['kernel'].astype(np.float64)  # (ph, pw, 3, D)
  shift = np.einsum('hwcd,c->d', kernel, offset.astype(np.float64))
  new_kernel = kernel * scale.astype(np.float64)[None, None, :, None]
  logging.info('Folded image normalisation (scale %s, offset %s) into the patch '
               'embedding.', scale, offset)
  out = {**params, 'embedding': {'kernel': new_kernel.astype(np.float32)}}
  if 'bias' in params['embedding']:
    out['embedding']['bias'] = (params['embedding']['bias'] + shift).astype(np.float32)
  else:
    # No patch bias (CLIP): the shift is the same for every patch token, so the
    # patch rows of the position embedding (added next, a constant too) take it.
    enc = params['Transformer']
    posemb = np.array(enc['posembed_input']['pos_embedding'], np.float64)
    posemb[:, posemb_prefix:] += shift
    out['Transformer'] = {**enc, 'posembed_input': {
        'pos_embedding': posemb.astype(np.float32)}}
  return out


def _reader(state: Mapping[str, np.ndarray], source: str, what: str
            ) -> state_lib.StateReader:
  return state_lib.StateReader(
      state, source, missing='it does not match its config.json.',
      mismatch=' but config.json implies {shape}.',
      leftover=lambda key: f', which no {what} parameter maps to')


def _ln(r: state_lib.StateReader, key: str, width: int) -> Params:
  return {'scale': r.pop(key + '.weight', (width,)), 'bias': r.pop(key + '.bias', (width,))}


def _dense(r: state_lib.StateReader, key: str, shape: tuple, bias: bool = True) -> Params:
  out = {'kernel': np.ascontiguousarray(r.pop(key + '.weight', shape).T)}
  if bias:
    out['bias'] = r.pop(key + '.bias', (shape[0],))
  return out


def _heads(w: np.ndarray, b: Optional[np.ndarray], heads: int) -> Params:
  width = w.shape[1]
  out = {'kernel': np.ascontiguousarray(w.T.reshape(width, heads, -1))}
  if b is not None:
    out['bias'] = b.reshape(heads, -1)
  return out


def _attention(r: state_lib.StateReader, b: str, n: Mapping[str, str], width: int,
               heads: int, qkv_bias: bool) -> Params:
  attn = {}
  for name, short in (('query', 'q'), ('key', 'k'), ('value', 'v')):
    key = b + n[short]
    w = r.pop(key + '.weight', (width, width))
    bias = r.pop(key + '.bias', (width,)) if qkv_bias else None
    attn[name] = _heads(w, bias, heads)
  w = r.pop(b + n['o'] + '.weight', (width, width))
  attn['out'] = {'kernel': np.ascontiguousarray(w.T.reshape(heads, -1, width)),
                 'bias': r.pop(b + n['o'] + '.bias', (width,))}
  return attn


def _mlp(r: state_lib.StateReader, b: str, n: Mapping[str, str], width: int) -> Params:
  if r.has(b + 'mlp.weights_in.weight'):  # DINOv2's SwiGLU: [gate; value] packed
    w = r.pop(b + 'mlp.weights_in.weight')
    bias = r.pop(b + 'mlp.weights_in.bias', (w.shape[0],))
    h = w.shape[0] // 2
    return {'gate': {'kernel': np.ascontiguousarray(w[:h].T), 'bias': bias[:h]},
            'value': {'kernel': np.ascontiguousarray(w[h:].T), 'bias': bias[h:]},
            'out': _dense(r, b + 'mlp.weights_out', (width, h))}
  w = r.state.get(b + n['fc1'] + '.weight')
  hidden = w.shape[0] if w is not None and w.ndim == 2 else -1
  return {'Dense_0': _dense(r, b + n['fc1'], (hidden, width)),
          'Dense_1': _dense(r, b + n['fc2'], (width, hidden))}


def _strip(state: Mapping[str, np.ndarray], model_type: str, source: str
           ) -> tuple[dict, str]:
  """The state dict without its task model's prefix (and another tower's keys)."""
  state = {k: v for k, v in state.items() if not _OTHER_TOWER.match(k)}
  if model_type in ('vit', 'vit_mae', 'deit'):
    state = _hub_names(state)
  if model_type == 'vit_mae':
    decoder = [k for k in state if k.startswith('decoder.')]
    if decoder:
      logging.info('%s: the MAE decoder (%d tensors) is not read; the encoder is.',
                   source, len(decoder))
      state = {k: v for k, v in state.items() if not k.startswith('decoder.')}
  for prefix in _TYPES[model_type]['prefixes']:
    if any(k.startswith(prefix + 'embeddings.') for k in state):
      return state, prefix
  return state, ''


def to_params(state: Mapping[str, np.ndarray], config: Mapping[str, Any],
              source: str,
              preprocessor: Optional[Mapping[str, Any]] = None) -> Params:
  """HF weights + config.json (+ preprocessor_config.json) -> vit_jax params."""
  model_type, config = vision_config(config)
  state, p = _strip(state, model_type, source)
  n = _TYPES[model_type]['names']
  r = _reader(state, source, f'transformers {model_type!r}')
  width = int(config.get('hidden_size', 768))
  heads = int(config.get('num_attention_heads', 12))
  layers = int(config.get('num_hidden_layers', 12))
  patch = _square(config.get('patch_size', 16), 'patch_size', source)
  if width % heads:
    raise ValueError(f'{source}: hidden_size {width} is not divisible by '
                     f'num_attention_heads {heads}.')
  clip_like = model_type in ('clip_vision_model', 'siglip_vision_model')
  e = p + 'embeddings.'
  out: Params = {}
  if clip_like:
    out['embedding'] = {'kernel': np.ascontiguousarray(r.pop(
        e + 'patch_embedding.weight', (width, 3, patch, patch)).transpose(2, 3, 1, 0))}
    if r.has(e + 'patch_embedding.bias'):
      out['embedding']['bias'] = r.pop(e + 'patch_embedding.bias', (width,))
    if r.has(e + 'class_embedding'):
      out['cls'] = r.pop(e + 'class_embedding', (width,)).reshape(1, 1, width)
    posemb = r.pop(e + 'position_embedding.weight')[None]
  else:
    out['embedding'] = {
        'kernel': np.ascontiguousarray(r.pop(
            e + 'patch_embeddings.projection.weight',
            (width, 3, patch, patch)).transpose(2, 3, 1, 0)),
        'bias': r.pop(e + 'patch_embeddings.projection.bias', (width,))}
    out['cls'] = r.pop(e + 'cls_token', (1, 1, width))
    if r.has(e + 'distillation_token'):
      out['dist_token'] = r.pop(e + 'distillation_token', (1, 1, width))
    if r.has(e + 'register_tokens'):
      out['registers'] = r.pop(e + 'register_tokens')
    if r.has(e + 'mask_token'):  # masked-image modelling only: unused at inference
      r.state.pop(e + 'mask_token')
    posemb = r.pop(e + 'position_embeddings')
  if posemb.ndim != 3 or posemb.shape[2] != width:
    raise ValueError(f'Checkpoint {source}: position embeddings of shape {posemb.shape}, '
                     f'expected (1, tokens, {width}).')
  if 'registers' in out:
    # Dinov2WithRegisters embeds [class, patches], then inserts the registers
    # without any: the class token's row becomes part of the token.
    out['cls'] = out['cls'] + posemb[:, :1]
    posemb = posemb[:, 1:]
  encoder: Params = {'posembed_input': {'pos_embedding': posemb}}
  if r.has(p + 'pre_layrnorm.weight'):
    encoder['pre_norm'] = _ln(r, p + 'pre_layrnorm', width)
  qkv_bias = bool(config.get('qkv_bias', True))
  for i in range(layers):
    b = f'{p}{n["layers"]}{i}.'
    block = {'LayerNorm_0': _ln(r, b + n['ln1'], width),
             'MultiHeadDotProductAttention_0': _attention(r, b, n, width, heads, qkv_bias),
             'LayerNorm_1': _ln(r, b + n['ln2'], width),
             'MlpBlock_0': _mlp(r, b, n, width)}
    for j in (1, 2):
      if r.has(f'{b}layer_scale{j}.lambda1'):
        block[f'LayerScale_{j - 1}'] = {'scale': r.pop(f'{b}layer_scale{j}.lambda1',
                                                       (width,))}
    encoder[f'encoderblock_{i}'] = block
  encoder['encoder_norm'] = _ln(r, p + n['norm'], width)
  out['Transformer'] = encoder
  if r.has(p + 'head.probe'):
    out['MAPHead_0'] = _map_head(r, p + 'head.', width, heads)
  if r.has(p + 'pooler.dense.weight'):
    if 'dist_token' in out:
      raise ValueError(f'Checkpoint {source} is a DeiTModel, whose pooler reads the class '
                       'token beside a distillation token, which vit_jax cannot express; '
                       'convert DeiTForImageClassification(WithTeacher) instead.')
    size = r.state[p + 'pooler.dense.weight'].shape[0]
    out['pre_logits'] = _dense(r, p + 'pooler.dense', (size, width))
  _heads_of_task(r, out, width, source)
  r.finish()
  prefix = 0 if 'registers' in out else int('cls' in out) + int('dist_token' in out)
  return fold_normalization(out, *normalization(preprocessor, source), posemb_prefix=prefix)


def _map_head(r: state_lib.StateReader, p: str, width: int, heads: int) -> Params:
  """SigLIP's attention-pooling head (torch MultiheadAttention) -> MAPHead_0."""
  w = r.pop(p + 'attention.in_proj_weight', (3 * width, width))
  b = r.pop(p + 'attention.in_proj_bias', (3 * width,))
  attn = {name: _heads(w[j * width:(j + 1) * width], b[j * width:(j + 1) * width], heads)
          for j, name in enumerate(('query', 'key', 'value'))}
  o = r.pop(p + 'attention.out_proj.weight', (width, width))
  attn['out'] = {'kernel': np.ascontiguousarray(o.T.reshape(heads, -1, width)),
                 'bias': r.pop(p + 'attention.out_proj.bias', (width,))}
  w = r.state.get(p + 'mlp.fc1.weight')
  hidden = w.shape[0] if w is not None and w.ndim == 2 else -1
  return {'probe': r.pop(p + 'probe', (1, 1, width)),
          'MultiHeadDotProductAttention_0': attn,
          'LayerNorm_0': _ln(r, p + 'layernorm', width),
          'MlpBlock_0': {'Dense_0': _dense(r, p + 'mlp.fc1', (hidden, width)),
                         'Dense_1': _dense(r, p + 'mlp.fc2', (width, hidden))}}


def _heads_of_task(r: state_lib.StateReader, out: Params, width: int, source: str) -> None:
  """The classifier(s) of a task model: our head (and DeiT's head_dist)."""
  def take(key: str, bias: bool = True) -> Params:
    classes = r.state[key + '.weight'].shape[0]
    tree = _dense(r, key, (classes, width), bias)
    if not bias:  # CLIP's visual_projection: a head whose bias is zero
      tree['bias'] = np.zeros(classes, np.float32)
    return tree
  if r.has('cls_classifier.weight'):  # DeiTForImageClassificationWithTeacher
    out['head'] = take('cls_classifier')
    out['head_dist'] = take('distillation_classifier')
  elif r.has('classifier.weight'):
    if 'pre_logits' in out:
      raise ValueError(f'Checkpoint {source} has both a pooler and a classifier; '
                       'ViTForImageClassification classifies the class token '
                       'without the pooler, which vit_jax cannot express.')
    if 'MAPHead_0' in out or 'registers' in out or (
        'LayerScale_0' in out['Transformer'].get('encoderblock_0', {})):
      raise ValueError(f'Checkpoint {source} is a transformers image classifier whose '
                       'head reads other features than vit_jax pools (DINOv2: class '
                       'token and mean patch token; SigLIP: mean token); convert the '
                       'backbone (Dinov2Model, SiglipVisionModel) instead.')
    out['head'] = take('classifier')
    if 'dist_token' in out:
      # DeiTForImageClassification: the class head alone. Our distilled model
      # averages two heads, so the class head is doubled and the other is zero.
      out['head'] = {k: 2 * v for k, v in out['head'].items()}
      out['head_dist'] = {k: np.zeros_like(v) for k, v in out['head'].items()}
  elif r.has('visual_projection.weight'):
    out['head'] = take('visual_projection', bias=False)


def _target(params: Mapping[str, Any], source: str) -> str:
  """The transformers model type that holds `params`, or a one-line error naming what none can."""
  enc = params['Transformer']
  block = enc.get('encoderblock_0', {})
  attn = block.get('MultiHeadDotProductAttention_0', {})
  refuse = (('stem' in params, 'is an MLP-Mixer'),
            ('conv_root' in params, 'is a ResNet hybrid'),
            ('fc_norm' in params, 'normalises after pooling (fc_norm)'),
            ('query_norm' in attn, 'has query/key normalisation (qk_norm)'),
            ('norm' in block.get('MlpBlock_0', {}), 'has a norm inside the MLP (mlp_norm)'))
  for bad, what in refuse:
    if bad:
      raise ValueError(f'Checkpoint {source} {what}, which no transformers ViT-family '
                       'model holds; write the timm format instead.')
  if 'MAPHead_0' in params:
    if 'cls' in params or 'registers' in params or 'dist_token' in params or (
        'pre_norm' in enc or 'LayerScale_0' in block or 'head' in params):
      raise ValueError(f'Checkpoint {source} pools with a MAP head but also has prefix '
                       'tokens, pre_norm, layer scale or a head, which SiglipVisionModel '
                       'does not; write the timm format (or pass --drop_head).')
    return 'siglip_vision_model'
  if 'cls' not in params:
    raise ValueError(f'Checkpoint {source} pools by averaging (no class token), '
                     'which transformers ViT cannot do (it reads the class '
                     'token); write the timm format instead.')
  if 'dist_token' in params:
    if 'registers' in params or 'LayerScale_0' in block or 'pre_norm' in enc:
      raise ValueError(f'Checkpoint {source} has a distillation token with registers, '
                       'layer scale or pre_norm, which DeiT does not; write the timm format.')
    return 'deit'
  if 'pre_norm' in enc:
    if 'registers' in params or 'LayerScale_0' in block:
      raise ValueError(f'Checkpoint {source} has pre_norm with registers or layer scale, '
                       'which CLIPVisionModel does not; write the timm format instead.')
    return 'clip_vision_model'
  if 'registers' in params or 'LayerScale_0' in block or 'gate' in block.get(
      'MlpBlock_0', {}):
    if 'head' in params or 'pre_logits' in params:
      raise ValueError(f'Checkpoint {source} is DINOv2-like with a head, which '
                       'Dinov2Model does not have; pass --drop_head, or write the timm format.')
    return 'dinov2_with_registers' if 'registers' in params else 'dinov2'
  return 'vit'


def _write_heads(w: Mapping[str, Any]) -> np.ndarray:
  k = np.asarray(w['kernel'], np.float32)
  return np.ascontiguousarray(k.reshape(k.shape[0], -1).T)


def from_params(params: Mapping[str, Any], source: str,
                model_options: Optional[Mapping[str, Any]] = None
                ) -> tuple[dict[str, np.ndarray], dict[str, Any], dict[str, Any]]:
  """vit_jax ViT params -> (HF state dict in the Hub layout, config.json, preprocessor_config.json).

  `model_options` are the model's activation and layer_norm_epsilon (default the
  published ViT's: tanh-GELU, 1e-6), which config.json records.
  """
  model_options = dict(model_options or {})
  model_type = _target(params, source)
  has_head, has_pooler = 'head' in params, 'pre_logits' in params
  if has_head and has_pooler:
    raise ValueError(f'Checkpoint {source} has a pre-logits layer and a head; '
                     'ViTForImageClassification has no pre-logits layer and '
                     'ViTModel no head. Pass --drop_head to write a ViTModel '
                     'whose pooler is the pre-logits layer.')
  if model_type == 'deit' and not has_head:
    raise ValueError(f'Checkpoint {source} is distilled but has no heads; transformers '
                     'DeiTModel pools only the class token (through a pooler), so keep the '
                     'heads or write the timm format.')
  if has_pooler and model_type != 'vit':
    raise ValueError(f'Checkpoint {source} has a pre-logits layer, which only ViTModel '
                     'has (as its pooler); pass --drop_head or write the timm format.')
  if model_type == 'clip_vision_model' and has_head and np.any(
      np.asarray(params['head']['bias']) != 0):
    raise ValueError(f'Checkpoint {source}: CLIPVisionModelWithProjection has a '
                     'projection without bias, but this head has one; pass --drop_head '
                     'or write the timm format.')
  activation = model_options.get('activation', 'gelu_tanh')
  if activation == 'swiglu' and model_type not in ('dinov2', 'dinov2_with_registers'):
    raise ValueError(f'Checkpoint {source} has a SwiGLU MLP, which only transformers '
                     'DINOv2 has; write the timm format instead.')
  f32 = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))  # noqa: E731
  kernel = f32(params['embedding']['kernel'])
  patch, _, channels, width = kernel.shape
  if kernel.shape[0] != kernel.shape[1] or channels != 3:
    raise ValueError(f'Checkpoint {source}: patch embedding {kernel.shape} is not '
                     'square patches of RGB pixels.')
  enc = params['Transformer']
  posemb = f32(enc['posembed_input']['pos_embedding'])
  prefix_rows = posemb.shape[1] - _grid_tokens(params, posemb.shape[1])
  grid = int(round(np.sqrt(posemb.shape[1] - prefix_rows)))
  if grid * grid != posemb.shape[1] - prefix_rows:
    raise ValueError(f'Checkpoint {source}: {posemb.shape[1] - prefix_rows} position '
                     'embeddings are not a square grid; transformers ViTs need '
                     'square images.')
  clip_like = model_type in ('clip_vision_model', 'siglip_vision_model')
  n = _TYPES[model_type]['names']
  if clip_like:
    p = 'vision_model.' if has_head else ''
  else:
    p = {'vit': 'vit.', 'deit': 'deit.'}.get(model_type, '') if has_head else ''
  e = p + 'embeddings.'
  state: dict[str, np.ndarray] = {}
  cls = f32(params['cls']) if 'cls' in params else None
  if model_type == 'dinov2_with_registers':
    registers = f32(params['registers'])
    if prefix_rows:  # rows for [class, registers]: fold the registers' into them
      registers = registers + posemb[:, 1:1 + registers.shape[1]]
      posemb = np.concatenate([posemb[:, :1], posemb[:, 1 + registers.shape[1]:]], 1)
    else:  # no_embed_class: the class token has no row; give it a zero one
      posemb = np.concatenate([np.zeros((1, 1, width), np.float32), posemb], 1)
    state[e + 'register_tokens'] = f32(registers)
  elif prefix_rows == 0 and cls is not None:
    # no_embed_class without registers: zero rows for the prefix tokens.
    lead = 1 + int('dist_token' in params)
    posemb = np.concatenate([np.zeros((1, lead, width), np.float32), posemb], 1)
  if clip_like:
    state[e + 'patch_embedding.weight'] = f32(kernel.transpose(3, 2, 0, 1))
    if model_type == 'clip_vision_model':
      if 'bias' in params['embedding']:
        raise ValueError(f'Checkpoint {source} has pre_norm and a patch-embedding bias; '
                         'CLIPVisionModel has none. Write the timm format instead.')
      state[e + 'class_embedding'] = cls.reshape(width)
    else:
      state[e + 'patch_embedding.bias'] = f32(params['embedding']['bias'])
    state[e + 'position_embedding.weight'] = f32(posemb[0])
  else:
    state[e + 'cls_token'] = cls
    state[e + 'position_embeddings'] = posemb
    state[e + 'patch_embeddings.projection.weight'] = f32(kernel.transpose(3, 2, 0, 1))
    state[e + 'patch_embeddings.projection.bias'] = f32(params['embedding']['bias'])
    if 'dist_token' in params:
      state[e + 'distillation_token'] = f32(params['dist_token'])
    if model_type.startswith('dinov2'):
      state[e + 'mask_token'] = np.zeros((1, width), np.float32)
  if 'pre_norm' in enc:
    state[p + 'pre_layrnorm.weight'] = f32(enc['pre_norm']['scale'])
    state[p + 'pre_layrnorm.bias'] = f32(enc['pre_norm']['bias'])
  layers, heads, mlp, qkv_bias = 0, None, None, True
  while f'encoderblock_{layers}' in enc:
    blk = enc[f'encoderblock_{layers}']
    attn = blk['MultiHeadDotProductAttention_0']
    heads = attn['query']['kernel'].shape[1]
    b = f'{p}{n["layers"]}{layers}.'
    qkv_bias = 'bias' in attn['query']
    if not qkv_bias and model_type not in ('vit', 'deit', 'vit_mae', 'dinov2',
                                           'dinov2_with_registers'):
      raise ValueError(f'Checkpoint {source} has no query/key/value biases, which '
                       f'{model_type} always has; write the timm format instead.')
    for name, short in (('query', 'q'), ('key', 'k'), ('value', 'v')):
      state[f'{b}{n[short]}.weight'] = _write_heads(attn[name])
      if qkv_bias:
        state[f'{b}{n[short]}.bias'] = f32(np.asarray(attn[name]['bias']).reshape(-1))
    o = f32(attn['out']['kernel'])
    state[f'{b}{n["o"]}.weight'] = f32(o.reshape(-1, width).T)
    state[f'{b}{n["o"]}.bias'] = f32(attn['out']['bias'])
    for name, key in (('LayerNorm_0', 'ln1'), ('LayerNorm_1', 'ln2')):
      state[f'{b}{n[key]}.weight'] = f32(blk[name]['scale'])
      state[f'{b}{n[key]}.bias'] = f32(blk[name]['bias'])
    m = blk['MlpBlock_0']
    if 'gate' in m:
      state[b + 'mlp.weights_in.weight'] = f32(np.concatenate(
          [np.asarray(m['gate']['kernel']).T, np.asarray(m['value']['kernel']).T]))
      state[b + 'mlp.weights_in.bias'] = f32(np.concatenate(
          [np.asarray(m['gate']['bias']), np.asarray(m['value']['bias'])]))
      state[b + 'mlp.weights_out.weight'] = f32(np.asarray(m['out']['kernel']).T)
      state[b + 'mlp.weights_out.bias'] = f32(m['out']['bias'])
      mlp = m['gate']['kernel'].shape[1]
    else:
      mlp = m['Dense_0']['kernel'].shape[1]
      for name, key in (('Dense_0', 'fc1'), ('Dense_1', 'fc2')):
        state[f'{b}{n[key]}.weight'] = f32(np.asarray(m[name]['kernel']).T)
        state[f'{b}{n[key]}.bias'] = f32(m[name]['bias'])
    if model_type.startswith('dinov2'):
      for j in (0, 1):  # Dinov2 layers always scale: ones are no scale
        scale = blk.get(f'LayerScale_{j}', {'scale': np.ones(width)})['scale']
        state[f'{b}layer_scale{j + 1}.lambda1'] = f32(scale)
    layers += 1
  state[p + n['norm'] + '.weight'] = f32(enc['encoder_norm']['scale'])
  state[p + n['norm'] + '.bias'] = f32(enc['encoder_norm']['bias'])
  if 'MAPHead_0' in params:
    h = params['MAPHead_0']
    a = h['MultiHeadDotProductAttention_0']
    q = p + 'head.'
    state[q + 'probe'] = f32(h['probe'])
    state[q + 'attention.in_proj_weight'] = f32(np.concatenate(
        [_write_heads(a[k]) for k in ('query', 'key', 'value')]))
    state[q + 'attention.in_proj_bias'] = f32(np.concatenate(
        [np.asarray(a[k]['bias']).reshape(-1) for k in ('query', 'key', 'value')]))
    state[q + 'attention.out_proj.weight'] = f32(np.asarray(a['out']['kernel']).reshape(
        -1, width).T)
    state[q + 'attention.out_proj.bias'] = f32(a['out']['bias'])
    state[q + 'layernorm.weight'] = f32(h['LayerNorm_0']['scale'])
    state[q + 'layernorm.bias'] = f32(h['LayerNorm_0']['bias'])
    for name, key in (('Dense_0', 'fc1'), ('Dense_1', 'fc2')):
      state[f'{q}mlp.{key}.weight'] = f32(np.asarray(h['MlpBlock_0'][name]['kernel']).T)
      state[f'{q}mlp.{key}.bias'] = f32(h['MlpBlock_0'][name]['bias'])
  classes = None
  if has_pooler:
    w = f32(params['pre_logits']['kernel'])
    state['pooler.dense.weight'] = f32(w.T)
    state['pooler.dense.bias'] = f32(params['pre_logits']['bias'])
  if has_head:
    w = f32(params['head']['kernel'])
    classes = w.shape[1]
    if model_type == 'clip_vision_model':
      state['visual_projection.weight'] = f32(w.T)
    elif model_type == 'deit':
      for name, key in (('head', 'cls_classifier'), ('head_dist', 'distillation_classifier')):
        state[key + '.weight'] = f32(np.asarray(params[name]['kernel']).T)
        state[key + '.bias'] = f32(params[name]['bias'])
    else:
      state['classifier.weight'] = f32(w.T)
      state['classifier.bias'] = f32(params['head']['bias'])
  config = _config(model_type, has_head, has_pooler, dict(
      hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
      hidden_act=_HIDDEN_ACT['gelu' if activation == 'swiglu' else activation],
      layer_norm_eps=float(model_options.get('layer_norm_epsilon', 1e-6)),
      image_size=grid * patch, patch_size=patch, num_channels=3), mlp, qkv_bias,
      classes, params)
  preprocessor = {
      'image_processor_type': 'ViTImageProcessor',
      'do_resize': True,
      'size': {'height': grid * patch, 'width': grid * patch},
      'resample': 2,  # bilinear, as vit_jax's evaluation resize
      'do_rescale': True,
      'rescale_factor': 1 / 255,
      'do_normalize': True,
      'image_mean': [0.5, 0.5, 0.5],
      'image_std': [0.5, 0.5, 0.5],
  }
  return state, config, preprocessor


def _grid_tokens(params: Mapping[str, Any], rows: int) -> int:
  """How many of the position embedding's `rows` are patches' (the rest: prefix tokens')."""
  prefix = int('cls' in params) + int('dist_token' in params) + (
      np.shape(params['registers'])[1] if 'registers' in params else 0)
  side = int(round(np.sqrt(rows)))
  if prefix and side * side == rows and int(round(np.sqrt(rows - prefix))) ** 2 != rows - prefix:
    return rows  # no_embed_class: the patches only
  return rows - prefix


def _config(model_type: str, has_head: bool, has_pooler: bool, common: dict, mlp: int,
            qkv_bias: bool, classes: Optional[int], params: Mapping[str, Any]) -> dict:
  """config.json of `model_type` with the architecture in `common`."""
  classes_of = {'vit': 'ViTForImageClassification', 'deit':
                'DeiTForImageClassificationWithTeacher',
                'clip_vision_model': 'CLIPVisionModelWithProjection'}
  bare = {'vit': 'ViTModel', 'deit': 'DeiTModel', 'clip_vision_model': 'CLIPVisionModel',
          'siglip_vision_model': 'SiglipVisionModel', 'dinov2': 'Dinov2Model',
          'dinov2_with_registers': 'Dinov2WithRegistersModel'}
  config: dict[str, Any] = {
      'architectures': [classes_of[model_type] if has_head else bare[model_type]],
      'model_type': model_type, **common,
      'hidden_dropout_prob': 0.0, 'attention_probs_dropout_prob': 0.0,
      'attention_dropout': 0.0, 'initializer_range': 0.02, 'dtype': 'float32'}
  width = common['hidden_size']
  if model_type.startswith('dinov2'):
    swiglu = 'gate' in params['Transformer']['encoderblock_0']['MlpBlock_0']
    # Dinov2 sizes its MLP by an integer mlp_ratio (SwiGLU: 2/3 of it, rounded up to 8).
    width_of = lambda r: ((int(width * r * 2 / 3) + 7) // 8 * 8 if swiglu  # noqa: E731
                          else width * r)
    ratios = [r for r in range(1, 17) if width_of(r) == mlp]
    if not ratios:
      raise ValueError(f'MLP width {mlp} is no integer mlp_ratio of width {width} '
                       f'{"(SwiGLU) " if swiglu else ""}as transformers Dinov2 sizes it; '
                       'write the timm format instead.')
    config.update(mlp_ratio=ratios[0], use_swiglu_ffn=swiglu, qkv_bias=qkv_bias,
                  layerscale_value=1.0, drop_path_rate=0.0)
    if model_type == 'dinov2_with_registers':
      config['num_register_tokens'] = int(np.shape(params['registers'])[1])
  else:
    config['intermediate_size'] = mlp
  if model_type in ('vit', 'deit'):
    config.update(qkv_bias=qkv_bias, encoder_stride=common['patch_size'])
  if model_type == 'vit':
    config.update(pooler_act='tanh', pooler_output_size=width)
    if has_pooler:
      config['pooler_output_size'] = int(np.shape(params['pre_logits']['kernel'])[1])
  if model_type == 'clip_vision_model' and has_head:
    config['projection_dim'] = classes
  if has_head and model_type != 'clip_vision_model':
    config['id2label'] = {str(i): f'LABEL_{i}' for i in range(classes)}
    config['label2id'] = {f'LABEL_{i}': i for i in range(classes)}
  return config
