"""Fine-tuning an AugReg checkpoint ("How to train your ViT?") by its file name.

  python -m vit_jax.main \
    --config=configs/augreg.py:B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0,cifar10 \
    --workdir=DIR

Argument: FILENAME,DATASET[,lr=VALUE|INDEX]: lr picks a value of the fine-tuning sweep as
in configs/vit.py (default 0.03, the original's). As the original's augreg.py: 500 steps
with 100 warm-up and dropout 0 (AugReg's regularisation is for pre-training only).
The file name's first part names the model (Ti_16, S_32, B_16, L_16, R_Ti_16,
R26_S_32, ...); the checkpoint is gs://vit_models/augreg/NAME.npz unless
--config.pretrained_path names a local copy.
"""
from vit_jax.configs import base
from vit_jax.configs import recipes

AUGREG_DIR = 'gs://vit_models/augreg'


def augreg_model(filename: str) -> str:
  """The preset of an AugReg file name: 'R26_S_32-i21k-...' -> 'R26+ViT-S_32'."""
  head = filename.split('-')[0]
  if head.startswith('R_'):
    name = 'R+ViT-' + head[2:]
  elif head.startswith('R26_') or head.startswith('R50_'):
    name = head[:3] + '+ViT-' + head[4:]
  else:
    name = 'ViT-' + head
  return recipes.model_name(name)


def get_config(arg: str = 'B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0,cifar10'):
  """Returns the fine-tuning config for 'AUGREG_FILENAME,DATASET[,lr=VALUE|INDEX]'."""
  (filename, *rest), options = recipes.split_arg(arg, 'AUGREG_FILENAME,DATASET')
  filename = filename.removesuffix('.npz')
  dataset, lr = rest[0] if rest else 'cifar10', options.get('lr', '')
  # Every mistake of the argument at once, before any of it is applied.
  name, _, _ = recipes.check_arg(arg, lambda: augreg_model(filename),
                                 lambda: recipes.check_dataset(dataset),
                                 lambda: lr and recipes.pick_lr(dataset, lr))
  c = base.get_base_config()
  c.model_name = name
  recipes.apply_augreg_finetune(c, dataset, lr)
  c.pretrained_path = f'{AUGREG_DIR}/{filename}.npz'
  return c
