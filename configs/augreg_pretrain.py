"""AugReg pre-training ("How to train your ViT?", Steiner et al. 2021) at one of its levels.

  python -m vit_jax.main --config=configs/augreg_pretrain.py:b16,imagenet2012,medium2 \
      --workdir=DIR
  (add ,reg=0.1 for dropout and stochastic depth 0.1)

Levels (big_vision configs/vit_i1k.py): none, light1 (RandAugment (2, 0)), light2 (2, 10;
Mixup 0.2), medium1 (2, 15; 0.2), medium2 (2, 15; 0.5), strong1 (2, 20; 0.5), strong2
(2, 20; 0.8). Adam lr 1e-3, weight decay 0.1 (big_vision's 1e-4, not scaled by the lr),
batch 4096, 10k warm-up, cosine, 300 epochs, clipping at 1.
"""
from vit_jax.configs import base
from vit_jax.configs import recipes


def get_config(arg: str = 'b16,imagenet2012,medium2'):
  """Returns the AugReg pre-training config for 'MODEL,DATASET,LEVEL[,reg=0.1]'."""
  positional, named = recipes.split_arg(arg, 'MODEL,DATASET,LEVEL', options=('reg',))
  if len(positional) != 3:
    raise ValueError(f'config argument {arg!r}: expected MODEL,DATASET,LEVEL[,reg=...]')
  model, dataset, level = positional
  # Every mistake of the argument at once, before any of it is applied.
  name, _, _, reg = recipes.check_arg(arg, lambda: recipes.model_name(model),
                                      lambda: recipes.check_dataset(dataset),
                                      lambda: recipes.check_augreg_level(level),
                                   lambda: recipes.check_augreg_reg(named.get('reg', 0.0)))
  c = base.get_base_config()
  c.model_name = name
  recipes.apply_augreg_pretrain(c, dataset, c.model_name, level, reg)
  return c
