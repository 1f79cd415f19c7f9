"""Pre-training a ViT from scratch with the paper's recipe (its Table 3).

  python -m vit_jax.main --config=configs/pretrain.py:b16,imagenet2012 --workdir=DIR

imagenet2012: 300 epochs, lr 3e-3, cosine, weight decay 0.3, dropout 0.1, clipping at 1.
imagenet21k: 90 epochs, lr 1e-3, linear, weight decay 0.03, dropout 0.1 (sigmoid loss,
multi-hot labels, head bias -10). Other datasets (the embedded mnist5k, digits,
synthetic, for trying the recipe out) take the ImageNet row for 100,000 steps.
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
