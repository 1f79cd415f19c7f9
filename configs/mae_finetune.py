"""MAE fine-tuning (He et al. 2021) of a pre-trained encoder, as facebookresearch/mae's B.

  python -m vit_jax.main --config=configs/mae_finetune.py:b16,imagenet2012 --workdir=DIR \
      --config.pretrained_path=MAE_WORKDIR/params.npz

Layer-wise lr decay 0.65, AdamW lr 5e-4 x batch/256 (batch 1024), weight decay 0.05, 100
epochs with 5 of warm-up, drop path 0.1, RandAugment (2, 9, noise 0.5), random erasing
0.25, Mixup 0.8 / CutMix 1.0, label smoothing 0.1, global average pooling (no fc_norm).
"""
from vit_jax.configs import base
from vit_jax.configs import recipes


def get_config(arg: str = 'b16,imagenet2012'):
  """Returns the MAE fine-tuning config for 'MODEL,DATASET'."""
  (model, *rest), _ = recipes.split_arg(arg, options=())
  c = base.get_base_config()
  c.model_name = recipes.model_name(model)
  recipes.apply_mae_finetune(c, rest[0] if rest else 'imagenet2012')
  return c
