"""Self-supervised pre-training by self-distillation with no labels (DINO, Caron et al.).

  python -m vit_jax.main --config=configs/pretrain_dino.py:s16,imagenet2012 --workdir=DIR

Argument: MODEL,DATASET (a ViT preset or short name, any dataset vit_jax.data.sources
knows, folder:ROOT included: labels are not read). DINO's recipe (main_dino.py, ViT-S/16):
a student and its momentum teacher (EMA 0.996 -> 1, cosine) see 2 global crops (224 px,
40-100% of the area) and 8 local crops (96 px, 5-40%) with flips, colour jitter, grayscale,
blur and solarisation; the teacher sees the global crops only. Its centred, sharpened
softmax (tau_t 0.04) is the student's target (tau_s 0.1) for every pair of different views.
Head: MLP 2048 -> 256 -> L2 norm -> 65,536 weight-normalised prototypes, last layer frozen
for the first epoch. AdamW lr 5e-4 x batch/256 (batch 1024), 10 warm-up epochs of 100,
cosine to 1e-6, weight decay cosine 0.04 -> 0.4, gradient clipping 3.0 per tensor, drop
path 0.1. The official's longer runs warm tau_t up from 0.04 to 0.07 over 30 epochs:
  --config.objectives.dino.teacher_temp=0.07 \
  --config.objectives.dino.warmup_teacher_temp_steps=STEPS
params.npz is the teacher's backbone in the published ViT layout (configs/vit.py
fine-tunes it); dino_params.npz beside it holds the teacher's and the student's heads.
"""
from vit_jax.configs import base
from vit_jax.configs import recipes


def get_config(arg: str = 's16,imagenet2012'):
  """Returns the DINO pre-training config for 'MODEL,DATASET'."""
  (model, *rest), _ = recipes.split_arg(arg, options=())
  c = base.get_base_config()
  c.model_name = recipes.model_name(model)
  recipes.apply_dino_pretrain(c, rest[0] if rest else 'imagenet2012')
  return c
