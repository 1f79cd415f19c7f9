"""DeiT from scratch (Touvron et al. 2021), values checked against facebookresearch/deit.

  python -m vit_jax.main --config=configs/deit.py:s16,imagenet2012 --workdir=DIR

AdamW, lr 5e-4 x batch/512 (batch 1024), weight decay 0.05, 300 epochs with 5 of warm-up,
cosine to 1e-5, label smoothing 0.1, stochastic depth 0.1, RandAugment (2, 9, noise 0.5),
random erasing 0.25, Mixup 0.8 / CutMix 1.0, repeated augmentation (3 copies of each
image).
"""
from vit_jax.configs import base
from vit_jax.configs import recipes


def get_config(arg: str = 's16,imagenet2012'):
  """Returns the DeiT config for 'MODEL,DATASET'."""
  (model, *rest), _ = recipes.split_arg(arg, options=())
  dataset = rest[0] if rest else 'imagenet2012'
  # Every mistake of the argument at once, before any of it is applied.
  name, _ = recipes.check_arg(arg, lambda: recipes.model_name(model),
                              lambda: recipes.check_dataset(dataset))
  c = base.get_base_config()
  c.model_name = name
  recipes.apply_deit(c, dataset)
  return c
