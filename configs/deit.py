"""DeiT from scratch (Touvron et al. 2021), values checked against facebookresearch/deit.

  python -m vit_jax.main --config=configs/deit.py:s16,imagenet2012 --workdir=DIR
  python -m vit_jax.main --config=configs/deit.py:s16,imagenet2012,distill=hard \
      --config.objectives.distill.teacher=TEACHER --workdir=DIR

AdamW, lr 5e-4 x batch/512 (batch 1024), weight decay 0.05, 300 epochs with 5 of warm-up,
cosine to 1e-5, label smoothing 0.1, stochastic depth 0.1, RandAugment (2, 9, noise 0.5),
random erasing 0.25, Mixup 0.8 / CutMix 1.0, repeated augmentation (3 copies of each
image).

distill=MODE trains the same recipe against a frozen teacher (vit_jax.train.distill):
'hard' (DeiT's recommended form) and 'soft' add the distillation token and head, alpha 0.5,
tau 1.0; 'logits' is Hinton's logit distillation; 'patient' is big_vision's function
matching (KL alone, mixup 1.0, 1200 epochs). The teacher is timm's ViT-B/16 AugReg2
(recipes.DISTILL_TEACHER) unless config.objectives.distill.teacher names another
checkpoint: a vit_jax workdir or params.npz, a timm or transformers checkpoint.
"""
from vit_jax.configs import base
from vit_jax.configs import recipes
from vit_jax.train import distill


def get_config(arg: str = 's16,imagenet2012'):
  """Returns the DeiT config for 'MODEL,DATASET[,distill=MODE]'."""
  (model, *rest), options = recipes.split_arg(arg, options=('distill',))
  dataset = rest[0] if rest else 'imagenet2012'
  mode = options.get('distill')
  # Every mistake of the argument at once, before any of it is applied.
  name, *_ = recipes.check_arg(
      arg, lambda: recipes.model_name(model), lambda: recipes.check_dataset(dataset),
      lambda: mode is None or distill.check_mode(mode, 'distill'))
  c = base.get_base_config()
  c.model_name = name
  recipes.apply_deit(c, dataset)
  if mode is not None:
    recipes.apply_deit_distill(c, dataset, mode)
  return c
