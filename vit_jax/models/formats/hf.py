"""Hugging Face `transformers` ViT checkpoints <-> the vit_jax parameter tree (numpy only).

Covers `ViTModel` (pooler = our `pre_logits`: dense + tanh on the class token)
and `ViTForImageClassification` (`vit.` prefix, `classifier` = our `head` on the
class token, no pooler). Keys are read in the Hub layout
(`encoder.layer.{i}.attention.attention.query`, what `save_pretrained` writes)
and in the transformers 5 module layout (`layers.{i}.attention.q_proj`);
they are written in the Hub layout, which every transformers version loads.

Real differences, handled explicitly:
- `hidden_act='gelu'` is exact GELU; vit_jax uses the tanh approximation
  ('gelu_pytorch_tanh', 'gelu_new', 'gelu_fast' are that). Reading 'gelu' is an
  error unless the caller accepts the mismatch (exact_gelu='accept'); writing
  sets 'gelu_pytorch_tanh', so transformers reproduces our logits.
- Mean pooling ('gap'), hybrids and MLP-Mixer have no HF ViT counterpart.
- A pre-logits layer together with a head fits neither HF class.
- Image normalisation: vit_jax feeds pixels scaled to [-1, 1] (HF mean = std =
  0.5); other `preprocessor_config.json` statistics are folded into the patch
  embedding, which is linear.
"""
import re
from typing import Any, Mapping, Optional

from absl import logging
import numpy as np

from vit_jax.models.formats import state as state_lib

Params = dict[str, Any]

# hidden_act values that are the tanh approximation of GELU.
TANH_GELU = ('gelu_pytorch_tanh', 'gelu_new', 'gelu_fast')
EXACT_GELU_CHOICES = ('error', 'accept')
_LN_EPS = 1e-6  # vit_jax's LayerNorm epsilon
# Vision transformers of other model types: what vit_jax lacks to hold them.
_UNSUPPORTED_TYPES = {
    'beit': 'relative position bias (BEiT)',
    'data2vec-vision': 'relative position bias (Data2Vec-Vision, BEiT layout)',
}
# transformers 5 module names -> the Hub layout.
_V5_TO_HUB = (
    (r'(^|\.)layers\.(\d+)\.', r'\1encoder.layer.\2.'),
    (r'\.attention\.q_proj\.', '.attention.attention.query.'),
    (r'\.attention\.k_proj\.', '.attention.attention.key.'),
    (r'\.attention\.v_proj\.', '.attention.attention.value.'),
    (r'\.attention\.o_proj\.', '.attention.output.dense.'),
    (r'\.mlp\.fc1\.', '.intermediate.dense.'),
    (r'\.mlp\.fc2\.', '.output.dense.'),
)


def _hub_names(state: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  out = {}
  for key, value in state.items():
    for pattern, repl in _V5_TO_HUB:
      key = re.sub(pattern, repl, key)
    out[key] = value
  return out


def looks_like_hf(keys) -> bool:
  """Whether state dict keys are those of a transformers ViT (not timm's)."""
  return any(k.startswith(('vit.embeddings.', 'embeddings.patch_embeddings.'))
             for k in keys)


def _square(value: Any, what: str, source: str) -> int:
  if isinstance(value, (list, tuple)):
    if len(value) != 2 or value[0] != value[1]:
      raise ValueError(f'{source}: {what}={list(value)} is not square; vit_jax '
                       'converts square patches and images only.')
    value = value[0]
  return int(value)


def check_config(config: Mapping[str, Any], source: str,
                 exact_gelu: str = 'error') -> None:
  """Raises a one-line error for a config.json vit_jax cannot reproduce."""
  if exact_gelu not in EXACT_GELU_CHOICES:
    raise ValueError(f'exact_gelu={exact_gelu!r}; use one of '
                     f'{EXACT_GELU_CHOICES}.')
  model_type = config.get('model_type')
  if model_type in _UNSUPPORTED_TYPES:
    raise ValueError(f'{source} is a transformers {model_type!r} model with '
                     f'{_UNSUPPORTED_TYPES[model_type]}, which the vit_jax ViT does not '
                     'support yet.')
  if model_type != 'vit':
    raise ValueError(f'{source} is a transformers {model_type!r} model, not '
                     "'vit'; vit_jax converts ViTModel / "
                     'ViTForImageClassification checkpoints only.')
  act = config.get('hidden_act', 'gelu')
  if act == 'gelu':
    if exact_gelu == 'error':
      raise ValueError(f"{source} has hidden_act='gelu' (exact GELU) but vit_jax "
                       'models use tanh-approximated GELU (logits differ by '
                       '~1e-3 relative); pass --accept_exact_gelu '
                       "(exact_gelu='accept') to convert anyway (the google/vit-* "
                       'checkpoints were trained with tanh GELU).')
    logging.warning("%s: hidden_act='gelu' (exact) runs as tanh-approximated "
                    'GELU in vit_jax.', source)
  elif act not in TANH_GELU:
    raise ValueError(f'{source} has hidden_act={act!r}; vit_jax models use '
                     f'tanh-approximated GELU ({", ".join(TANH_GELU)}).')
  eps = float(config.get('layer_norm_eps', 1e-12))
  if eps > 1e-5:
    raise ValueError(f'{source} has layer_norm_eps={eps:g}; vit_jax LayerNorms '
                     f'use {_LN_EPS:g} and cannot reproduce it.')
  if int(config.get('num_channels', 3)) != 3:
    raise ValueError(f'{source} has num_channels={config["num_channels"]}; '
                     'vit_jax models take RGB images (3 channels).')
  if config.get('pooler_act', 'tanh') != 'tanh':
    raise ValueError(f'{source} has pooler_act={config["pooler_act"]!r}; the '
                     'vit_jax pre-logits layer is dense + tanh.')
  _square(config.get('patch_size', 16), 'patch_size', source)


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
                       offset: np.ndarray) -> Params:
  """Makes the patch embedding take [-1, 1] pixels instead of HF-normalised ones."""
  if np.allclose(scale, 1, rtol=0, atol=1e-6) and np.allclose(offset, 0, atol=1e-6):
    return params
  kernel = params['embedding']['kernel'].astype(np.float64)  # (ph, pw, 3, D)
  bias = params['embedding']['bias'].astype(np.float64)
  new_bias = bias + np.einsum('hwcd,c->d', kernel, offset.astype(np.float64))
  new_kernel = kernel * scale.astype(np.float64)[None, None, :, None]
  logging.info('Folded image normalisation (scale %s, offset %s) into the patch '
               'embedding.', scale, offset)
  return {**params, 'embedding': {'kernel': new_kernel.astype(np.float32),
                                  'bias': new_bias.astype(np.float32)}}


def _reader(state: Mapping[str, np.ndarray], source: str) -> state_lib.StateReader:
  return state_lib.StateReader(
      state, source, missing='it does not match its config.json.',
      mismatch=' but config.json implies {shape}.',
      leftover=lambda key: (', which no ViTModel / ViTForImageClassification '
                            'parameter maps to'))


def to_params(state: Mapping[str, np.ndarray], config: Mapping[str, Any],
              source: str,
              preprocessor: Optional[Mapping[str, Any]] = None) -> Params:
  """HF ViT weights + config.json (+ preprocessor_config.json) -> vit_jax params."""
  state = _hub_names(state)
  # ViTForImageClassification nests the ViTModel under 'vit.'.
  prefix = 'vit.' if any(k.startswith('vit.') for k in state) else ''
  r = _reader(state, source)
  width = int(config.get('hidden_size', 768))
  heads = int(config.get('num_attention_heads', 12))
  layers = int(config.get('num_hidden_layers', 12))
  mlp = int(config.get('intermediate_size', 3072))
  patch = _square(config.get('patch_size', 16), 'patch_size', source)
  if width % heads:
    raise ValueError(f'{source}: hidden_size {width} is not divisible by '
                     f'num_attention_heads {heads}.')
  hd = width // heads
  p = prefix + 'embeddings.'
  out: Params = {
      'embedding': {
          'kernel': np.ascontiguousarray(r.pop(
              p + 'patch_embeddings.projection.weight',
              (width, 3, patch, patch)).transpose(2, 3, 1, 0)),
          'bias': r.pop(p + 'patch_embeddings.projection.bias', (width,))},
      'cls': r.pop(p + 'cls_token', (1, 1, width)),
  }
  if p + 'mask_token' in r.state:  # ViTModel(use_mask_token=True): unused at inference
    r.state.pop(p + 'mask_token')
  posemb = r.state.get(p + 'position_embeddings')
  tokens = posemb.shape[1] if posemb is not None and posemb.ndim == 3 else -1
  encoder: Params = {'posembed_input': {'pos_embedding': r.pop(
      p + 'position_embeddings', (1, tokens, width))}}
  qkv_bias = bool(config.get('qkv_bias', True))
  for i in range(layers):
    b = f'{prefix}encoder.layer.{i}.'
    attn = {}
    for name in ('query', 'key', 'value'):
      w = r.pop(f'{b}attention.attention.{name}.weight', (width, width))
      bias = (r.pop(f'{b}attention.attention.{name}.bias', (width,)) if qkv_bias
              else np.zeros(width, np.float32))  # no bias = zero bias
      attn[name] = {'kernel': np.ascontiguousarray(w.T.reshape(width, heads, hd)),
                    'bias': bias.reshape(heads, hd)}
    w = r.pop(f'{b}attention.output.dense.weight', (width, width))
    attn['out'] = {'kernel': np.ascontiguousarray(w.T.reshape(heads, hd, width)),
                   'bias': r.pop(f'{b}attention.output.dense.bias', (width,))}
    encoder[f'encoderblock_{i}'] = {
        'LayerNorm_0': {'scale': r.pop(f'{b}layernorm_before.weight', (width,)),
                        'bias': r.pop(f'{b}layernorm_before.bias', (width,))},
        'MultiHeadDotProductAttention_0': attn,
        'LayerNorm_1': {'scale': r.pop(f'{b}layernorm_after.weight', (width,)),
                        'bias': r.pop(f'{b}layernorm_after.bias', (width,))},
        'MlpBlock_0': {
            'Dense_0': {'kernel': np.ascontiguousarray(
                r.pop(f'{b}intermediate.dense.weight', (mlp, width)).T),
                        'bias': r.pop(f'{b}intermediate.dense.bias', (mlp,))},
            'Dense_1': {'kernel': np.ascontiguousarray(
                r.pop(f'{b}output.dense.weight', (width, mlp)).T),
                        'bias': r.pop(f'{b}output.dense.bias', (width,))},
        },
    }
  encoder['encoder_norm'] = {'scale': r.pop(prefix + 'layernorm.weight', (width,)),
                             'bias': r.pop(prefix + 'layernorm.bias', (width,))}
  out['Transformer'] = encoder
  if r.has(prefix + 'pooler.dense.weight'):
    size = r.state[prefix + 'pooler.dense.weight'].shape[0]
    out['pre_logits'] = {
        'kernel': np.ascontiguousarray(
            r.pop(prefix + 'pooler.dense.weight', (size, width)).T),
        'bias': r.pop(prefix + 'pooler.dense.bias', (size,))}
  if r.has('classifier.weight'):
    if 'pre_logits' in out:
      raise ValueError(f'Checkpoint {source} has both a pooler and a classifier; '
                       'ViTForImageClassification classifies the class token '
                       'without the pooler, which vit_jax cannot express.')
    classes = r.state['classifier.weight'].shape[0]
    out['head'] = {
        'kernel': np.ascontiguousarray(
            r.pop('classifier.weight', (classes, width)).T),
        'bias': r.pop('classifier.bias', (classes,))}
  r.finish()
  return fold_normalization(out, *normalization(preprocessor, source))


def from_params(params: Mapping[str, Any], source: str
                ) -> tuple[dict[str, np.ndarray], dict[str, Any], dict[str, Any]]:
  """vit_jax ViT params -> (HF state dict in the Hub layout, config.json, preprocessor_config.json)."""
  if 'stem' in params:
    raise ValueError(f'Checkpoint {source} is an MLP-Mixer, which transformers '
                     'ViT cannot hold.')
  if 'conv_root' in params:
    raise ValueError(f'Checkpoint {source} is a ResNet hybrid, which transformers '
                     'ViT (ViTModel / ViTForImageClassification) cannot hold; '
                     'write the timm format instead.')
  if 'fc_norm' in params:
    raise ValueError(f'Checkpoint {source} normalises after pooling (fc_norm), which '
                     'transformers ViT cannot do (its layernorm precedes the pooler); '
                     'write the timm format instead.')
  if 'cls' not in params:
    raise ValueError(f'Checkpoint {source} pools by averaging (no class token), '
                     'which transformers ViT cannot do (it reads the class '
                     'token); write the timm format instead.')
  has_head, has_pooler = 'head' in params, 'pre_logits' in params
  if has_head and has_pooler:
    raise ValueError(f'Checkpoint {source} has a pre-logits layer and a head; '
                     'ViTForImageClassification has no pre-logits layer and '
                     'ViTModel no head. Pass --drop_head to write a ViTModel '
                     'whose pooler is the pre-logits layer.')
  f32 = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))  # noqa: E731
  kernel = f32(params['embedding']['kernel'])
  patch, _, channels, width = kernel.shape
  if kernel.shape[0] != kernel.shape[1] or channels != 3:
    raise ValueError(f'Checkpoint {source}: patch embedding {kernel.shape} is not '
                     'square patches of RGB pixels.')
  enc = params['Transformer']
  posemb = f32(enc['posembed_input']['pos_embedding'])
  grid = int(round(np.sqrt(posemb.shape[1] - 1)))
  if grid * grid != posemb.shape[1] - 1:
    raise ValueError(f'Checkpoint {source}: {posemb.shape[1] - 1} position '
                     'embeddings are not a square grid; transformers ViT needs '
                     'square images.')
  prefix = 'vit.' if has_head else ''
  state: dict[str, np.ndarray] = {
      prefix + 'embeddings.cls_token': f32(params['cls']),
      prefix + 'embeddings.position_embeddings': posemb,
      prefix + 'embeddings.patch_embeddings.projection.weight': f32(
          kernel.transpose(3, 2, 0, 1)),
      prefix + 'embeddings.patch_embeddings.projection.bias': f32(
          params['embedding']['bias']),
  }
  layers = 0
  heads = mlp = None
  while f'encoderblock_{layers}' in enc:
    blk = enc[f'encoderblock_{layers}']
    attn = blk['MultiHeadDotProductAttention_0']
    heads = attn['query']['kernel'].shape[1]
    b = f'{prefix}encoder.layer.{layers}.'
    for name in ('query', 'key', 'value'):
      state[f'{b}attention.attention.{name}.weight'] = f32(
          np.asarray(attn[name]['kernel']).reshape(width, -1).T)
      state[f'{b}attention.attention.{name}.bias'] = f32(
          np.asarray(attn[name]['bias']).reshape(-1))
    state[f'{b}attention.output.dense.weight'] = f32(
        np.asarray(attn['out']['kernel']).reshape(-1, width).T)
    state[f'{b}attention.output.dense.bias'] = f32(attn['out']['bias'])
    state[f'{b}layernorm_before.weight'] = f32(blk['LayerNorm_0']['scale'])
    state[f'{b}layernorm_before.bias'] = f32(blk['LayerNorm_0']['bias'])
    state[f'{b}layernorm_after.weight'] = f32(blk['LayerNorm_1']['scale'])
    state[f'{b}layernorm_after.bias'] = f32(blk['LayerNorm_1']['bias'])
    dense0, dense1 = blk['MlpBlock_0']['Dense_0'], blk['MlpBlock_0']['Dense_1']
    mlp = dense0['kernel'].shape[1]
    state[f'{b}intermediate.dense.weight'] = f32(np.asarray(dense0['kernel']).T)
    state[f'{b}intermediate.dense.bias'] = f32(dense0['bias'])
    state[f'{b}output.dense.weight'] = f32(np.asarray(dense1['kernel']).T)
    state[f'{b}output.dense.bias'] = f32(dense1['bias'])
    layers += 1
  state[prefix + 'layernorm.weight'] = f32(enc['encoder_norm']['scale'])
  state[prefix + 'layernorm.bias'] = f32(enc['encoder_norm']['bias'])
  config: dict[str, Any] = {
      'architectures': ['ViTForImageClassification' if has_head else 'ViTModel'],
      'model_type': 'vit',
      'hidden_size': width,
      'num_hidden_layers': layers,
      'num_attention_heads': heads,
      'intermediate_size': mlp,
      'hidden_act': 'gelu_pytorch_tanh',
      'hidden_dropout_prob': 0.0,
      'attention_probs_dropout_prob': 0.0,
      'initializer_range': 0.02,
      'layer_norm_eps': _LN_EPS,
      'image_size': grid * patch,
      'patch_size': patch,
      'num_channels': 3,
      'qkv_bias': True,
      'encoder_stride': patch,
      'pooler_act': 'tanh',
      'pooler_output_size': width,
      'dtype': 'float32',
  }
  if has_pooler:
    w = f32(params['pre_logits']['kernel'])
    state['pooler.dense.weight'] = f32(w.T)
    state['pooler.dense.bias'] = f32(params['pre_logits']['bias'])
    config['pooler_output_size'] = w.shape[1]
  if has_head:
    w = f32(params['head']['kernel'])
    state['classifier.weight'] = f32(w.T)
    state['classifier.bias'] = f32(params['head']['bias'])
    config['id2label'] = {str(i): f'LABEL_{i}' for i in range(w.shape[1])}
    config['label2id'] = {f'LABEL_{i}': i for i in range(w.shape[1])}
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
