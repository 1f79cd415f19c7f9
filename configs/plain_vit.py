"""big_vision's plain ViT baseline ("Better plain ViT baselines for ImageNet-1k", 2022).

  python -m vit_jax.main --config=configs/plain_vit.py:imagenet2012 --workdir=DIR
  python -m vit_jax.main --config=configs/plain_vit.py:mnist5k --workdir=DIR  # CPU, minutes

Values checked against big_vision/configs/vit_s16_i1k.py (76.5% top-1 in 90 epochs):
ViT-S/16, global average pooling, fixed 2-D sin-cos position embeddings
(model.posemb=sincos2d), tanh pre-logits of width 384, batch 1024, 90 epochs, inception
crop 224 (5-100% of the area), flips, RandAugment (2, 10), Mixup 0.2, no dropout, Adam
(b1 0.9, b2 0.999, first moment in bfloat16) lr 1e-3 with 10k warm-up steps then cosine,
weight decay 1e-4 decoupled from the lr (ours is multiplied by it: 0.1), clipping at 1.0.
`mnist5k`: the same model choices at the quickstart's size (width 96, 6 blocks, 7x7
patches of 28px digits, shifts of +-2 pixels, no RandAugment), batch 128, 600 steps.
"""
from vit_jax.configs import base
from vit_jax.configs import recipes

SMALL = 'mnist5k'
SMALL_STEPS = 600
SMALL_WARMUP = 100
SMALL_BATCH = 128


def get_config(arg: str = 'imagenet2012'):
  """Returns the plain ViT config for 'DATASET' (mnist5k: the small CPU variant)."""
  (dataset, *rest), _ = recipes.split_arg(arg, 'DATASET', options=())
  if rest:
    raise ValueError(f'config argument {arg!r}: expected one DATASET (e.g. imagenet2012).')
  recipes.check_arg(arg, lambda: recipes.check_dataset(dataset))
  c = base.get_base_config()
  c.model_name = recipes.model_name('s16')
  if dataset == SMALL:
    recipes.apply_quickstart_model(c)
  recipes.apply_plain_vit(c, dataset)
  if dataset == SMALL:
    c.model.representation_size = c.model.hidden_size
    recipes.apply_quickstart_data(c)
    c.batch = SMALL_BATCH
    c.batch_eval = 200
    c.total_steps = SMALL_STEPS
    c.warmup_steps = SMALL_WARMUP
    c.evals.test.every = 100
    c.log_every = 50
    c.checkpoint_every = 200
  return c
