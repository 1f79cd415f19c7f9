"""The ViT family (with its ResNet hybrids): what the rest of the package asks about it."""
from types import MappingProxyType
from typing import Any, Mapping, Optional

import flax.linen as nn

from vit_jax.models import families
from vit_jax.models.vit import arch
from vit_jax.models.vit import flops
from vit_jax.models.vit import model as model_lib
from vit_jax.models.vit import options as options_lib
from vit_jax.models.vit import tree


class ViTFamily(families.Family):
  """ViT and its hybrids: options from options.py, tree knowledge from tree.py."""
  name = 'vit'
  module = model_lib.VisionTransformer
  signature = ('hidden_size', 'transformer')
  options = MappingProxyType(options_lib.config_defaults())
  option_types = MappingProxyType(options_lib.config_types())
  nested = ('transformer',)
  posemb_path = tree.POSEMB_PATH
  prefix_keys = tree.PREFIX_KEYS
  fresh_keys = ('head', 'head_dist')
  formats = ('timm', 'hf')  # its conversions: timm.py, hf.py beside this file
  final_norm_keys = ('Transformer/encoder_norm', 'fc_norm')
  attention_fields = MappingProxyType(
      {'attention': 'xla', 'remat': False, 'scan_layers': False})
  # Pre-Linen numbering inside encoder blocks, as the original loader and timm read it.
  npz_renames = MappingProxyType({r'^encoderblock_\d+$': {
      'LayerNorm_0': 'LayerNorm_0',
      'MultiHeadDotProductAttention_0': 'MultiHeadDotProductAttention_1',
      'LayerNorm_1': 'LayerNorm_2',
      'MlpBlock_0': 'MlpBlock_3'}})

  embed = staticmethod(tree.embed)
  encode = staticmethod(tree.encode)
  adapt_posemb = staticmethod(tree.adapt_posemb)
  layer_of = staticmethod(tree.layer_of)

  def forward_flops(self, fields: Mapping[str, Any], res: int, num_classes: int) -> float:
    """Matmul/conv FLOPs of one forward pass at `res` pixels."""
    return flops.forward_flops(fields, res, num_classes)

  def width(self, fields: Mapping[str, Any]) -> int:
    """The token width (hidden_size)."""
    return fields['hidden_size']

  def patch_tokens(self, model: nn.Module, params: families.Params) -> Optional[int]:
    """Patch tokens of the tree's position embedding."""
    return tree.patch_tokens(model, params)

  def fields_from_params(self, params: families.Params) -> dict:
    """The options a tree fixes (pre-logits, registers, qk_norm, ...)."""
    return tree.fields_from_params(params)

  def prefix_tokens(self, model: Any) -> int:
    """Class + distillation + register tokens."""
    return model_lib.num_prefix_tokens(model)

  def class_token(self, model: Any) -> bool:
    """Whether the model prepends a class token."""
    return model_lib.has_class_token(model)

  def posemb_prefix_tokens(self, model: Any) -> int:
    """Prefix tokens with a position embedding (none with no_embed_class)."""
    return model_lib.posemb_prefix_tokens(model)

  def rgb_filters(self, model: nn.Module, params: families.Params) -> Any:
    """The patch embedding's kernel (None for a hybrid, which embeds ResNet features)."""
    return tree.rgb_filters(model, params)

  def owns(self, params: families.Params) -> bool:
    """A patch embedding or a Transformer."""
    return arch.owns(params)

  def kind(self, fields: Mapping[str, Any]) -> str:
    """'hybrid' or 'vit'."""
    return arch.kind(fields)

  def architecture(self, params: families.Params, source: str) -> dict:
    """Patch size, width, depth, heads, MLP, pooling, head, ResNet of a tree."""
    return arch.architecture(params, source)

  def misfits(self, cfg: Mapping[str, Any], fields: Mapping[str, Any],
              ignore_heads: bool) -> list[str]:
    """Sizes, class token and ResNet that differ from the preset."""
    return arch.misfits(cfg, fields, ignore_heads)

  def describe(self, fields: Mapping[str, Any]) -> str:
    """'width 768, 12 layers, MLP 3072, patch 16' (with the ResNet of a hybrid)."""
    return arch.describe(fields)

  def size_pairs(self, got: Mapping[str, Any], want: Mapping[str, Any]) -> dict[str, tuple]:
    """Width, layers, heads, MLP, class token, ResNet of two architectures."""
    return arch.size_pairs(got, want)

  def checkpoint_fields(self, params: families.Params, fields: Mapping[str, Any],
                        options: Optional[Mapping[str, Any]]) -> dict:
    """The head, pre-logits and the options the tree (or the format) fixes."""
    return arch.checkpoint_fields(params, fields, options)

  def base_preset(self, fields: Mapping[str, Any]) -> str:
    """ViT-B_16, or R50+ViT-B_16 for a hybrid."""
    return arch.BASE_PRESETS[arch.kind(fields)]

  def preset_overrides(self, fields: Mapping[str, Any]) -> dict:
    """Every architecture field, the transformer's flattened."""
    return arch.preset_overrides(fields)


FAMILY = ViTFamily()
