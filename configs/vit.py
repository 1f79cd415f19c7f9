"""Fine-tuning a ViT with the original vit_jax semantics and the paper's Table 4.

  python -m vit_jax.main --config=configs/vit.py:b16,cifar10 --workdir=DIR \
      --config.pretrained_dir=gs://vit_models/imagenet21k

Argument: MODEL,DATASET[,lr=VALUE|INDEX]. MODEL is a preset name (ViT-B_16) or short name
(b16, l16, r50_b16, ...); DATASET any name vit_jax.data.sources knows. lr picks one value
of the paper's fine-tuning sweep by value or by index: 0.001, 0.003, 0.01, 0.03
(imagenet2012: 0.003, 0.01, 0.03, 0.06), e.g. vit.py:b16,cifar10,lr=0.003 or
vit.py:b16,cifar10,lr=1. Without it: the original's rate (0.01 for b16 on cifar10, 0.03
elsewhere, 0.01 on VTAB tasks). The start checkpoint is pretrained_dir/MODEL.npz, or
--config.pretrained_path=FILE.npz (for example a params.npz this package exported).
"""
from vit_jax.configs import base
from vit_jax.configs import recipes


def get_config(arg: str = 'b16,cifar10'):
  """Returns the fine-tuning config for 'MODEL,DATASET[,lr=VALUE|INDEX]'."""
  (model, *rest), options = recipes.split_arg(arg)
  dataset, lr = rest[0] if rest else 'cifar10', options.get('lr', '')
  # Every mistake of the argument at once, before any of it is applied.
  name, _, _ = recipes.check_arg(arg, lambda: recipes.model_name(model),
                                 lambda: recipes.check_dataset(dataset),
                                 lambda: lr and recipes.pick_lr(dataset, lr))
  c = base.get_base_config()
  c.model_name = name
  recipes.apply_finetune(c, dataset, lr)
  c.pretrained_dir = 'gs://vit_models/imagenet21k'
  return c
