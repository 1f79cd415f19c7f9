"""Pre-training a ViT from scratch with the paper's recipe.

  python -m vit_jax.main --config=configs/pretrain.py:b16,imagenet2012 --workdir=DIR

Also imagenet21k (sigmoid loss, multi-hot labels, head bias -10) and the
embedded datasets (mnist5k, digits, synthetic) for trying the recipe out.
"""
from vit_jax.configs import base
from vit_jax.configs import recipes


def get_config(arg: str = 'b16,imagenet2012'):
  """Returns the pre-training config for 'MODEL,DATASET'."""
  model, _, dataset = arg.partition(',')
  c = base.get_base_config()
  c.model_name = recipes.model_name(model)
  recipes.apply_pretrain(c, dataset or 'imagenet2012', c.model_name)
  return c
