"""Named model presets: the original vit_jax names mapped to their architecture configs.

Each preset names its family (`family`: 'vit' or 'mixer'). Beyond the original
names come today's ViTs, with the architecture of timm's models of the same kind
(timm 1.0 `vision_transformer.py` / `deit.py`; the timm name in the comment):
ViT options (vit_jax/models/vit/options.py) set as timm's constructor flags set them, and
timm's default activation (exact GELU) where timm gives none.
"""
from typing import Any

import ml_collections

# ViT sizes: name -> (width, mlp_dim, num_heads, num_layers).
_VIT_SIZES = {
    'Ti': (192, 768, 3, 12),
    'S': (384, 1536, 6, 12),
    'B': (768, 3072, 12, 12),
    'L': (1024, 4096, 16, 24),
    'H': (1280, 5120, 16, 32),
    # DINOv2 ViT-g/14: SwiGLU of hidden width 4096 (timm mlp_ratio 2.66667 * 2, packed).
    'g': (1536, 4096, 24, 40),
}


def _vit(name: str, size: str, patch: int, *, dropout: float = 0.0,
         classifier: str = 'token', resnet=None,
         hidden=None, **options: Any) -> ml_collections.ConfigDict:
  """A ViT preset; `options` are VisionTransformer variant fields (e.g. num_registers)."""
  width, mlp, heads, layers = _VIT_SIZES[size] if hidden is None else hidden
  c = ml_collections.ConfigDict()
  c.family = 'vit'
  c.model_name = name
  c.patches = ml_collections.ConfigDict({'size': (patch, patch)})
  c.hidden_size = width
  c.transformer = ml_collections.ConfigDict({
      'mlp_dim': mlp,
      'num_heads': heads,
      'num_layers': layers,
      'attention_dropout_rate': 0.0,
      'dropout_rate': dropout,
  })
  c.classifier = classifier
  c.representation_size = None
  if resnet is not None:
    c.resnet = ml_collections.ConfigDict(
        {'num_layers': tuple(resnet), 'width_factor': 1})
  for key, value in options.items():
    c[key] = value
  return c


def _dinov2(size: str, registers: bool) -> ml_collections.ConfigDict:
  """timm vit_{size}_patch14[_reg4]_dinov2: layer scale 1e-5 (reg4: no_embed_class)."""
  extra = {'num_registers': 4, 'no_embed_class': True} if registers else {}
  return _vit(f'ViT-{size}_14-dinov2' + ('-reg4' if registers else ''), size, 14,
              layer_scale=1e-5, activation='swiglu' if size == 'g' else 'gelu',
              **extra)


def _modern() -> list:
  """Today's ViTs: DINOv2, CLIP, SigLIP, DeiT-III, distilled DeiT, registers."""
  cfgs = [_dinov2(size, reg) for reg in (False, True) for size in ('S', 'B', 'L', 'g')]
  clip = dict(pre_norm=True, layer_norm_epsilon=1e-5)
  return cfgs + [
      _vit('ViT-B_16-clip', 'B', 16, activation='gelu', **clip),  # vit_base_patch16_clip_224
      _vit('ViT-B_16-clip-quickgelu', 'B', 16, activation='quick_gelu',
           **clip),  # vit_base_patch16_clip_quickgelu_224 (OpenAI)
      # vit_base_patch16_siglip_224: MAP head, no class token.
      _vit('ViT-B_16-siglip', 'B', 16, classifier='map', activation='gelu'),
      # deit3_{small,base}_patch16_224.
      _vit('DeiT3-S_16', 'S', 16, no_embed_class=True, layer_scale=1e-6,
           activation='gelu'),
      _vit('DeiT3-B_16', 'B', 16, no_embed_class=True, layer_scale=1e-6,
           activation='gelu'),
      # deit_{small,base}_distilled_patch16_224.
      _vit('DeiT-S_16-distilled', 'S', 16, distilled=True, activation='gelu'),
      _vit('DeiT-B_16-distilled', 'B', 16, distilled=True, activation='gelu'),
      # vit_base_patch16_reg4_gap_256: average pooling then fc_norm, no class token.
      _vit('ViT-B_16-reg4-gap', 'B', 16, classifier='gap', num_registers=4,
           no_embed_class=True, fc_norm=True, activation='gelu'),
  ]


def _mixer(name: str, patch: int, hidden: int, blocks: int, tokens_mlp: int,
           channels_mlp: int) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.family = 'mixer'
  c.model_name = name
  c.patches = ml_collections.ConfigDict({'size': (patch, patch)})
  c.hidden_dim = hidden
  c.num_blocks = blocks
  c.tokens_mlp_dim = tokens_mlp
  c.channels_mlp_dim = channels_mlp
  return c


def _build() -> dict:
  """Returns every preset of the original repo, keyed by its original name."""
  cfgs = [
      _vit('testing', 'B', 16, dropout=0.1, hidden=(10, 10, 2, 1)),
      _vit('testing-unpooled', 'B', 16, dropout=0.1, hidden=(10, 10, 2, 1),
           classifier='unpooled'),
      _vit('ViT-Ti_16', 'Ti', 16),
      _vit('ViT-S_16', 'S', 16),
      _vit('ViT-S_32', 'S', 32),
      _vit('ViT-B_8', 'B', 8),
      _vit('ViT-B_16', 'B', 16),
      _vit('ViT-B_32', 'B', 32),
      _vit('ViT-L_16', 'L', 16, dropout=0.1),
      _vit('ViT-L_32', 'L', 32),
      _vit('ViT-H_14', 'H', 14, dropout=0.1),
      _vit('ViT-S_16-gap-norep', 'S', 16, classifier='gap'),
      _vit('ViT-S_32-gap-norep', 'S', 32, classifier='gap'),
      _vit('ViT-B_16-gap-norep', 'B', 16, classifier='gap'),
      _vit('ViT-B_32-gap-norep', 'B', 32, classifier='gap'),
      # Hybrids: the ResNet downsamples 4x (root) and 2x per stage after the
      # first, so 1x1 "patches" on its output give the effective patch size.
      _vit('R+ViT-Ti_16', 'Ti', 8, resnet=()),
      _vit('R26+ViT-S_32', 'S', 1, resnet=(2, 2, 2, 2)),
      _vit('R26+ViT-B_32', 'B', 1, resnet=(2, 2, 2, 2)),
      _vit('R50+ViT-B_16', 'B', 1, dropout=0.1, resnet=(3, 4, 9)),
      _vit('R50+ViT-L_32', 'L', 1, dropout=0.1, resnet=(3, 4, 6, 3)),
      _mixer('Mixer-B_16', 16, 768, 12, 384, 3072),
      _mixer('Mixer-B_32', 32, 768, 12, 384, 3072),
      _mixer('Mixer-L_16', 16, 1024, 24, 512, 4096),
  ] + _modern()
  return {c.model_name: c.lock() for c in cfgs}


PRESETS = _build()
