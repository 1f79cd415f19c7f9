"""The ViT family: one `VisionTransformer` whose variants are options, and all it knows.

  options.py  each option once: default, allowed values, timm / transformers name; the
              option check, the config.model section and the docs table derive from it
  layers.py   patch embedding, MLP, layer scale, MAP head; norms and activations by name
  model.py    BlockConfig, Encoder1DBlock, Encoder, VisionTransformer
  tree.py     what a parameter tree says: options, prefix tokens, posemb fitting, layers
  flops.py    analytic FLOPs
  family.py   the family class the rest of the package asks (FAMILY)

The names below are the package's public surface (`from vit_jax.models import vit`); the
modules above document them.
"""
from vit_jax.models.vit.family import FAMILY
from vit_jax.models.vit.family import ViTFamily
from vit_jax.models.vit.flops import forward_flops
from vit_jax.models.vit.flops import map_head_flops
from vit_jax.models.vit.flops import transformer_flops
from vit_jax.models.vit.layers import ACTIVATIONS
from vit_jax.models.vit.layers import GATED_ACTIVATIONS
from vit_jax.models.vit.layers import NORMS
from vit_jax.models.vit.layers import PATCH_EMBEDDINGS
from vit_jax.models.vit.layers import REMAT_POLICIES
from vit_jax.models.vit.layers import remat_policy
from vit_jax.models.vit.model import BlockConfig
from vit_jax.models.vit.model import Encoder
from vit_jax.models.vit.model import Encoder1DBlock
from vit_jax.models.vit.model import VisionTransformer
from vit_jax.models.vit.model import check_options
from vit_jax.models.vit.model import encoder
from vit_jax.models.vit.model import has_class_token
from vit_jax.models.vit.model import num_prefix_tokens
from vit_jax.models.vit.model import patch_embedding
from vit_jax.models.vit.model import posemb_prefix_tokens
from vit_jax.models.vit.options import OPTIONS
from vit_jax.models.vit.options import resolve_fused_qkv
from vit_jax.models.vit.tree import POSEMB_PATH
from vit_jax.models.vit.tree import adapt_posemb
from vit_jax.models.vit.tree import embed
from vit_jax.models.vit.tree import encode
from vit_jax.models.vit.tree import fields_from_params
from vit_jax.models.vit.tree import layer_of
from vit_jax.models.vit.tree import no_embed_class_of_params
from vit_jax.models.vit.tree import prefix_tokens_of_params
