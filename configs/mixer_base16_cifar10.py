"""Fine-tuning Mixer-B/16 (ImageNet-21k) on CIFAR-10, as in the original repo.

  python -m vit_jax.main --config=configs/mixer_base16_cifar10.py --workdir=DIR
"""
from vit_jax.configs import base
from vit_jax.configs import recipes


def get_config():
  """Returns the Mixer-B/16 CIFAR-10 fine-tuning config."""
  c = base.get_base_config()
  c.model_name = 'Mixer-B_16'
  recipes.apply_finetune(c, 'cifar10')
  c.pp.crop = 224
  c.pp.resize = 256
  c.pretrained_dir = 'gs://mixer_models/imagenet21k'
  return c
