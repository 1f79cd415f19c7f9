"""Self-supervised pre-training as a masked autoencoder (MAE, He et al.).

  python -m vit_jax.main --config=configs/pretrain_mae.py:b16,imagenet2012 --workdir=DIR

Argument: MODEL,DATASET (a ViT preset or short name, any dataset vit_jax.data.sources
knows, folder:ROOT included: labels are not read). MAE's recipe: 75% of the patches
masked per image, the ViT encoder runs on the visible 25% only, a decoder of 8 blocks of
width 512 with fixed 2D sin-cos positions and a shared mask token reconstructs the masked
patches' per-patch normalised pixels (mean squared error on those only); AdamW lr
1.5e-4 x batch/256, b2 0.95, weight decay 0.05, cosine with 40 warm-up epochs of 800,
batch 4096, random resized crops (20-100%) and flips. Decoder sizes and the position
embedding are config.objectives.mae.*. params.npz is the encoder in the published ViT
layout (configs/vit.py fine-tunes it); mae_params.npz beside it holds the decoder, which
`python -m vit_jax.visualize` uses to draw reconstructions.
"""
from vit_jax.configs import base
from vit_jax.configs import recipes


def get_config(arg: str = 'b16,imagenet2012'):
  """Returns the MAE pre-training config for 'MODEL,DATASET'."""
  (model, *rest), _ = recipes.split_arg(arg, options=())
  c = base.get_base_config()
  c.model_name = recipes.model_name(model)
  recipes.apply_mae_pretrain(c, rest[0] if rest else 'imagenet2012')
  return c
