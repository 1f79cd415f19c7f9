"""Fine-tuning a ViT with the original vit_jax semantics.

  python -m vit_jax.main --config=configs/vit.py:b16,cifar10 --workdir=DIR \
      --config.pretrained_dir=gs://vit_models/imagenet21k

MODEL is a preset name (ViT-B_16) or short name (b16, l16, r50_b16, ...);
DATASET any name vit_jax.data.sources knows. The start checkpoint is
pretrained_dir/MODEL.npz, or --config.pretrained_path=FILE.npz (for example a
params.npz this package exported).
"""
from vit_jax.configs import base
from vit_jax.configs import recipes


def get_config(arg: str = 'b16,cifar10'):
  """Returns the fine-tuning config for 'MODEL,DATASET'."""
  model, _, dataset = arg.partition(',')
  c = base.get_base_config()
  c.model_name = recipes.model_name(model)
  recipes.apply_finetune(c, dataset or 'cifar10')
  c.pretrained_dir = 'gs://vit_models/imagenet21k'
  return c
