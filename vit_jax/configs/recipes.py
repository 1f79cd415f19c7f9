"""The paper's pre-training (Table 3) and fine-tuning (Table 4) recipes, as config values.

Fine-tuning follows the original google-research/vision_transformer code (configs/common.py,
configs/vit.py, configs/augreg.py, input_pipeline.py, train.py) where it and the paper agree
or the paper is silent; pre-training follows Table 3 of the paper. Where a value is kept
different from one of them on purpose, the reason is written next to it (and in the
README's recipe section).
"""
import dataclasses
from typing import Any, Callable

import ml_collections

from vit_jax import errors
from vit_jax import models
from vit_jax.data import catalog
from vit_jax.train import distill

# Short names accepted on the command line (vit.py:b16,cifar10) -> presets.
MODEL_SHORT_NAMES = {
    'ti16': 'ViT-Ti_16', 's16': 'ViT-S_16', 's32': 'ViT-S_32', 'b8': 'ViT-B_8',
    'b16': 'ViT-B_16', 'b32': 'ViT-B_32', 'l16': 'ViT-L_16', 'l32': 'ViT-L_32',
    'h14': 'ViT-H_14', 'r_ti16': 'R+ViT-Ti_16', 'r26_s32': 'R26+ViT-S_32',
    'r26_b32': 'R26+ViT-B_32', 'r50_b16': 'R50+ViT-B_16',
    'r50_l32': 'R50+ViT-L_32', 'mixer_b16': 'Mixer-B_16',
    'mixer_b32': 'Mixer-B_32', 'mixer_l16': 'Mixer-L_16',
}


@dataclasses.dataclass(frozen=True)
class FinetuneData:
  """Per-dataset fine-tuning values: schedule length, held-out split, lr sweep."""
  steps: int
  train_split: str = ''    # '' = the dataset's whole training split
  minival_split: str = ''  # the held-out rest of it; '' = none
  sweep: tuple[float, ...] = (0.001, 0.003, 0.01, 0.03)  # Table 4's lr sweep


_IMAGENET_SWEEP = (0.003, 0.01, 0.03, 0.06)
_OTHER = FinetuneData(10_000)

# Table 4 steps; the held-out splits are the original's configs/common.py DATASET_PRESETS.
FINETUNE_DATA = {
    'cifar10': FinetuneData(10_000, 'train[:98%]', 'train[98%:]'),
    'cifar100': FinetuneData(10_000, 'train[:98%]', 'train[98%:]'),
    'imagenet2012': FinetuneData(20_000, 'train[:99%]', 'train[99%:]', _IMAGENET_SWEEP),
    # The original holds nothing out here (its augreg.py trains on 'train'), and the
    # catalog's splits (pets 'train', flowers 'train+validation') are the whole data.
    'oxford_iiit_pet': FinetuneData(500),
    'oxford_flowers102': FinetuneData(500),
}
# VTAB-1k tasks train on their 1,000-example train800val200 split: 2,500 steps at lr 0.01.
VTAB_STEPS = 2_500
VTAB_LR = 0.01

FINETUNE_STEPS = {name: d.steps for name, d in FINETUNE_DATA.items()}

# The original's per-model fine-tuning rates (its configs/vit.py); 0.03 elsewhere.
ORIGINAL_LR = {('ViT-B_16', 'cifar10'): 0.01}
DEFAULT_FINETUNE_LR = 0.03


def model_name(arg: str) -> str:
  """A preset name from a short name (b16) or the preset name itself."""
  name = MODEL_SHORT_NAMES.get(arg.lower(), arg)
  if name not in models.MODEL_CONFIGS:
    raise ValueError(models.unknown_model(arg, MODEL_SHORT_NAMES))
  return name


def check_dataset(name: str) -> str:
  """`name` if the trainer knows the dataset, else a short ValueError with the closest names."""
  try:
    catalog.check_name(name)
    return name
  except ValueError:
    pass  # raised below, without catalog's whole list as its context
  hint = errors.did_you_mean(name, catalog.known_names())
  raise ValueError(f'Unknown dataset {name!r} ({hint + " " if hint else ""}all: '
                   'python -m vit_jax.list)')


def check_arg(arg: str, *checks: Callable[[], Any]) -> list[Any]:
  """The values of the checks of one config argument; all their mistakes in one ValueError.

  One mistake is raised as it is; several are numbered in one line, so a second typo in
  the argument does not wait for the next try.
  """
  values, problems = [], []
  for check in checks:
    try:
      values.append(check())
    except ValueError as e:
      problems.append(e)
  if len(problems) == 1:
    raise problems[0]
  if problems:
    texts = [str(e).strip().rstrip('.') for e in problems]
    # 'Unknown model' reads as 'unknown model' mid-sentence; 'AugReg' keeps its capital.
    texts = [t[0].lower() + t[1:] if t.split(' ', 1)[0][1:].islower() else t for t in texts]
    raise ValueError(f'config argument {arg!r}: ' + '; '.join(
        f'{i}) {t}' for i, t in enumerate(texts, 1)) + '.')
  return values


def split_arg(arg: str, usage: str = 'MODEL,DATASET',
              options: tuple[str, ...] = ('lr',)) -> tuple[list[str], dict]:
  """'b16,cifar10,lr=0.01' -> (['b16', 'cifar10'], {'lr': '0.01'}); mistakes raise."""
  positional, named = [], {}
  for part in (p.strip() for p in arg.split(',')):
    key, eq, value = part.partition('=')
    if not eq:
      positional.append(part)
    elif key in options:
      named[key] = value
    else:
      raise ValueError(f'config argument {part!r}: unknown option {key!r}; known: '
                       f'{", ".join(o + "=" for o in options)}')
  if not positional or not positional[0] or len(positional) > len(usage.split(',')):
    raise ValueError(f'config argument {arg!r}: expected {usage}'
                     f'{"".join(f"[,{o}=...]" for o in options)}')
  return positional, named


def finetune_data(dataset: str) -> FinetuneData:
  """The per-dataset fine-tuning values (VTAB tasks and unknown datasets included)."""
  if dataset.startswith('vtab/'):
    return FinetuneData(VTAB_STEPS)
  return FINETUNE_DATA.get(dataset, _OTHER)


def lr_sweep(dataset: str) -> tuple[float, ...]:
  """The paper's fine-tuning lr sweep (Table 4) for a dataset."""
  return finetune_data(dataset).sweep


def pick_lr(dataset: str, choice: str) -> float:
  """A sweep value by value ('0.003') or index ('1'); anything else is a one-line error."""
  sweep = lr_sweep(dataset)
  listed = ', '.join(f'{i}: {v:g}' for i, v in enumerate(sweep))
  try:
    if choice.isdigit():
      return sweep[int(choice)]
    value = float(choice)
  except (ValueError, IndexError):
    value = None
  if value is not None:
    for v in sweep:
      if abs(v - value) <= 1e-9 * v:
        return v
  raise ValueError(f'config argument lr={choice!r} is not in the {dataset} lr sweep '
                   f'({listed}); pick a value or its index, or set --config.base_lr')


def original_lr(model: str, dataset: str) -> float:
  """The fine-tuning lr of the original's configs/vit.py (VTAB: the paper's 0.01)."""
  if dataset.startswith('vtab/'):
    return VTAB_LR
  return ORIGINAL_LR.get((model, dataset), DEFAULT_FINETUNE_LR)


def apply_finetune(c: ml_collections.ConfigDict, dataset: str, lr: str = '') -> None:
  """Table 4 / the original's fine-tuning of c.model_name on dataset; lr picks a sweep value."""
  data = finetune_data(dataset)
  c.dataset = dataset
  c.optimizer = 'sgd'
  c.optimizers.sgd.momentum = 0.9
  # The original keeps the momentum in bfloat16 (configs/common.py optim_dtype).
  c.optimizers.sgd.accumulator_dtype = 'bfloat16'
  c.batch = 512
  c.batch_eval = 512
  c.base_lr = pick_lr(dataset, lr) if lr else original_lr(c.model_name, dataset)
  # -1: the original's end of decay (train.py), 1e-5 after linear and 0 after cosine,
  # so a --config.decay_type=linear run also ends where the original's does.
  c.end_lr = -1.0
  c.decay_type = 'cosine'
  c.grad_clip_norm = 1.0
  c.weight_decay = 0.0
  c.total_steps = data.steps
  # 500 (the original's vit.py); 100 for 500-step runs (the original's augreg.py).
  c.warmup_steps = min(500, data.steps // 5)
  c.train_split = data.train_split
  c.objectives.supervised.loss = 'softmax_xent'
  # The original's train crop: inception crop (5-100% of the area, aspect 3/4-4/3) to
  # pp.crop and a random horizontal flip; evaluation resizes straight to pp.crop.
  c.pp.train = 'finetune_inception'
  c.pp.min_area = 0.05
  c.pp.flip = True
  c.pp.crop = 384
  c.pp.resize = 448  # read only if pp.train is switched to 'finetune'
  c.pp.eval = 'resize'
  c.pp.keep_aspect = False
  # Held-out minival during training, the test split once at the end.
  c.evals.test.every = 0
  c.evals.minival.split = data.minival_split
  c.evals.minival.every = 1000 if data.minival_split else -1
  c.checkpoint_every = 1000
  apply_imagenet_variants(c)


def apply_imagenet_variants(c: ml_collections.ConfigDict) -> None:
  """An ImageNet-1k run is also scored on ImageNet-v2 and ReaL, as often as on its test split.

  big_vision's configs/vit_i1k.py evaluates both beside the validation set; each is
  one more evaluator with its own data (vit_jax.evaluators.classification).
  """
  if c.dataset != 'imagenet2012':
    return
  every = c.evals.test.every
  c.evals.v2 = {'type': 'classification', 'every': every, 'dataset': 'imagenet_v2',
                'split': 'test'}
  c.evals.real = {'type': 'classification', 'every': every,
                  'dataset': 'imagenet2012_real', 'split': 'validation'}


def apply_augreg_finetune(c: ml_collections.ConfigDict, dataset: str, lr: str = '') -> None:
  """The original's configs/augreg.py: 500 steps, 100 warm-up, lr 0.03, no dropout."""
  apply_finetune(c, dataset, lr)
  c.base_lr = pick_lr(dataset, lr) if lr else DEFAULT_FINETUNE_LR
  c.total_steps = 500
  c.warmup_steps = 100
  c.model.dropout_rate = 0.0  # AugReg's regularisation is for pre-training only


@dataclasses.dataclass(frozen=True)
class PretrainRow:
  """One row of the paper's Table 3 (batch 4096, 10k warm-up, Adam .9/.999, 224px)."""
  epochs: int
  base_lr: float
  decay_type: str
  weight_decay: float  # the project's convention: decoupled, times the lr, kernels only
  dropout: float
  grad_clip_norm: float  # Table 3 clips only on ImageNet
  end_lr: float


# Table 3. JFT-300M is not public, so its rows are not configs (see the README).
PRETRAIN_TABLE = {
    'imagenet2012': PretrainRow(300, 3e-3, 'cosine', 0.3, 0.1, 1.0, 0.0),
    # Table 3 gives ViT-L 30 or 90 epochs; 90, as for ViT-B, so the two compare.
    # Models outside the table (Ti, S, H, hybrids, Mixer) take the dataset's row too.
    'imagenet21k': PretrainRow(90, 1e-3, 'linear', 0.03, 0.1, 0.0, 1e-5),
}
# Datasets without a row (embedded, folders, tfds:) are single-label like ImageNet: its
# row, for a fixed number of steps (their epochs would not cover the 10k warm-up).
OTHER_PRETRAIN_STEPS = 100_000


def apply_pretrain(c: ml_collections.ConfigDict, dataset: str,
                   model: str) -> None:
  """Table 3's pre-training of `model` on dataset: Adam, batch 4096, 10k warm-up, 224px."""
  row = PRETRAIN_TABLE.get(dataset, PRETRAIN_TABLE['imagenet2012'])
  c.dataset = dataset
  c.optimizer = 'adam'
  c.optimizers.adam.b1, c.optimizers.adam.b2 = 0.9, 0.999
  c.batch = 4096
  c.batch_eval = 4096
  c.base_lr = row.base_lr
  c.end_lr = row.end_lr
  c.warmup_steps = 10_000
  c.decay_type = row.decay_type
  c.weight_decay = row.weight_decay
  c.grad_clip_norm = row.grad_clip_norm
  c.model.dropout_rate = row.dropout
  c.model.representation_size = _width(model)
  c.pp.train = 'pretrain'
  c.pp.crop = 224
  # Evaluation: shorter side to 256 keeping the aspect ratio, then the central 224.
  c.pp.resize = 256
  c.pp.keep_aspect = True
  c.pp.eval = 'central_crop'
  if dataset in PRETRAIN_TABLE:
    c.total_steps = row.epochs * catalog.DATASETS[dataset].num_train // c.batch
  else:
    c.total_steps = OTHER_PRETRAIN_STEPS
  if dataset == 'imagenet21k':
    # Multi-label data: sigmoid loss, heads start at a low prior.
    c.objectives.supervised.loss = 'sigmoid_xent'
    c.pp.multi_hot = True
    c.model.head_bias_init = -10.0
  c.evals.test.every = 5000
  c.checkpoint_every = 2000
  apply_imagenet_variants(c)


def _width(model: str) -> int:
  cfg = models.get_model_config(model)
  return models.family_of(cfg).width(cfg)


# Self-supervised pre-training (no labels are read). The ViT paper's masked patch
# prediction (its B.1.2): Adam, lr 2e-4, 10k warm-up, cosine, batch 4096, 1M steps
# (about 14 epochs of JFT-300M); corrupt 50% of the patches (80% [mask], 10% another
# patch, 10% unchanged), predict their 3-bit mean colour.
MASKED_PATCH_STEPS = 1_000_000
# MAE (He et al.): AdamW, lr 1.5e-4 x batch / 256, b2 0.95, weight decay 0.05, cosine,
# 40 warm-up epochs of 800, 75% of the patches masked, decoder 8 x 512, random resized
# crops of 20-100% of the area with flips, per-patch normalised pixel targets.
MAE_EPOCHS = 800
MAE_WARMUP_EPOCHS = 40
MAE_BASE_LR = 1.5e-4  # per 256 images


def _apply_label_free(c: ml_collections.ConfigDict, dataset: str) -> None:
  """What both self-supervised recipes share: 224px, no head, few-shot probes."""
  c.dataset = dataset
  c.optimizer = 'adam'
  c.batch = 4096
  c.batch_eval = 4096
  c.model.dropout_rate = 0.0
  c.model.representation_size = 0  # no pre-logits layer: nothing would train it
  c.pp.train = 'pretrain'
  c.pp.crop = 224
  c.pp.resize = 256
  c.pp.keep_aspect = True
  c.pp.eval = 'central_crop'
  # Labels are read only by the few-shot probes of the learned features.
  c.evals.test.every = -1
  c.evals.fewshot.every = 10_000
  c.evals.fewshot.datasets = (dataset,)
  c.checkpoint_every = 2000


def apply_masked_patch_pretrain(c: ml_collections.ConfigDict, dataset: str) -> None:
  """The ViT paper's masked patch prediction (B.1.2) on dataset."""
  _apply_label_free(c, dataset)
  c.objective = 'masked_patch'
  c.optimizers.adam.b1, c.optimizers.adam.b2 = 0.9, 0.999
  c.base_lr = 2e-4
  c.end_lr = 0.0
  c.warmup_steps = 10_000
  c.decay_type = 'cosine'
  c.total_steps = MASKED_PATCH_STEPS
  # B.1.2 names no weight decay or clipping: Table 3's JFT row (0.1; clip only on ImageNet).
  c.weight_decay = 0.1
  c.grad_clip_norm = 0.0
  c.pp.min_area = 0.05


def apply_mae_pretrain(c: ml_collections.ConfigDict, dataset: str) -> None:
  """MAE's ImageNet pre-training recipe on dataset (epochs from the catalog's size)."""
  _apply_label_free(c, dataset)
  c.objective = 'mae'
  c.optimizers.adam.b1, c.optimizers.adam.b2 = 0.9, 0.95
  c.base_lr = MAE_BASE_LR * c.batch / 256
  c.end_lr = 0.0
  c.decay_type = 'cosine'
  c.weight_decay = 0.05
  c.grad_clip_norm = 0.0
  spec = catalog.DATASETS.get(dataset)
  if spec is not None and spec.num_train:
    per_epoch = max(1, spec.num_train // c.batch)
    c.total_steps = MAE_EPOCHS * per_epoch
    c.warmup_steps = MAE_WARMUP_EPOCHS * per_epoch
  else:
    c.total_steps = OTHER_PRETRAIN_STEPS
    c.warmup_steps = OTHER_PRETRAIN_STEPS * MAE_WARMUP_EPOCHS // MAE_EPOCHS
  c.pp.min_area = 0.2


# DINO (Caron et al.; main_dino.py's defaults, its ViT-S/16 ImageNet run): AdamW lr
# 5e-4 x batch / 256, 10 warm-up epochs of 100, cosine to 1e-6, weight decay cosine 0.04
# -> 0.4, gradient clipping 3.0 per tensor, drop path 0.1, batch 1024 (16 GPUs x 64);
# teacher momentum 0.996 -> 1 (cosine), tau_s 0.1, tau_t 0.04, centre momentum 0.9,
# head 2048 -> 256 -> K 65536 with g fixed to 1, last layer frozen for the first epoch;
# 2 global crops (224 px, 40-100% of the area) and 8 local crops (96 px, 5-40%).
# Differences kept: weight decay on kernels only (the official also decays the position
# embedding and class token), tau_t's warm-up (off here) stepped per step, not per
# epoch, and bicubic position-embedding resizing with JAX's Keys kernel (a = -0.5;
# torch's bicubic uses a = -0.75).
DINO_EPOCHS = 100
DINO_WARMUP_EPOCHS = 10
DINO_FREEZE_EPOCHS = 1
DINO_BASE_LR = 5e-4  # per 256 images
DINO_BATCH = 1024


def apply_dino_views(c: ml_collections.ConfigDict, local_crops: int = 8,
                     local_crop: int = 96) -> None:
  """DINO's multi-crop views: the two global compositions and `local_crops` local ones."""
  c.pp.multicrop.global_pp = ('dino_global1', 'dino_global2')
  c.pp.multicrop.local_pp = 'dino_local'
  c.pp.multicrop.local_crops = local_crops
  c.pp.multicrop.local_crop = local_crop


def apply_dino_pretrain(c: ml_collections.ConfigDict, dataset: str) -> None:
  """DINO's ImageNet pre-training recipe on dataset (epochs from the catalog's size)."""
  _apply_label_free(c, dataset)
  c.objective = 'dino'
  c.batch = DINO_BATCH
  c.batch_eval = DINO_BATCH
  c.optimizers.adam.b1, c.optimizers.adam.b2 = 0.9, 0.999
  c.base_lr = DINO_BASE_LR * c.batch / 256
  c.end_lr = 1e-6
  c.decay_type = 'cosine'
  c.weight_decay = 0.04
  c.weight_decay_end = 0.4
  c.grad_clip_norm = 3.0
  c.grad_clip_mode = 'per_tensor'
  c.model.stochastic_depth = 0.1  # the student's; the teacher runs without
  _apply_epochs(c, dataset, DINO_EPOCHS, DINO_WARMUP_EPOCHS)
  c.objectives.dino.freeze_last_layer_steps = (
      c.total_steps * DINO_FREEZE_EPOCHS // DINO_EPOCHS)
  c.pp.flip = True
  apply_dino_views(c)


# big_vision's plain ViT ("Better plain ViT baselines for ImageNet-1k", Beyer, Zhai and
# Kolesnikov 2022; big_vision configs/vit_s16_i1k.py, 76.5% top-1 for ViT-S/16 in 90
# epochs): AugReg's light2 pre-training (RandAugment (2, 10), Mixup 0.2, Adam lr 1e-3,
# decoupled wd 1e-4, 10k warm-up, cosine, clipping at 1, bf16 first moment, no dropout)
# at batch 1024 for 90 epochs, global average pooling, fixed 2-D sin-cos position
# embeddings, and the tanh pre-logits of the model's width (rep_size=True).
PLAIN_VIT_BATCH = 1024
PLAIN_VIT_EPOCHS = 90


def apply_plain_vit(c: ml_collections.ConfigDict, dataset: str) -> None:
  """big_vision's plain ViT recipe for c.model_name on dataset (90 epochs, batch 1024)."""
  apply_augreg_pretrain(c, dataset, c.model_name, 'light2')
  c.batch = PLAIN_VIT_BATCH
  c.batch_eval = PLAIN_VIT_BATCH
  c.total_steps = _epoch_steps(dataset, c.batch, PLAIN_VIT_EPOCHS) or OTHER_PRETRAIN_STEPS
  c.model.classifier = 'gap'
  c.model.posemb = 'sincos2d'
  c.objectives.supervised.loss = 'softmax_xent'
  if dataset == 'imagenet2012':  # big_vision holds out 1% of train as minival
    c.train_split = 'train[:99%]'
    c.evals.minival.split = 'train[99%:]'
    c.evals.minival.every = c.evals.test.every


def apply_quickstart_model(c: ml_collections.ConfigDict) -> None:
  """The quickstart's ViT: width 96, 6 blocks, 7x7 patches (16 tokens of a 28px digit)."""
  c.model_name = 'ViT-Ti_16'
  # Few tokens keep a CPU step cheap, so it can afford 6 blocks of width 96.
  c.model.hidden_size = 96
  c.model.num_layers = 6
  c.model.num_heads = 4
  c.model.mlp_dim = 384
  c.model.patches = {'size': (7, 7)}
  c.model.dropout_rate = 0.0


def apply_quickstart_data(c: ml_collections.ConfigDict) -> None:
  """The quickstart's input: mnist5k at 28px, shifts of +-2 pixels, no flips."""
  c.dataset = 'mnist5k'
  c.pp.train = 'finetune'  # pad 28 -> 32, random 28x28 crop: shifts of +-2 pixels
  c.pp.eval = 'central_crop'
  c.pp.resize = 28
  c.pp.pad = 2
  c.pp.crop = 28
  c.pp.flip = False  # mirrored digits are other digits
  c.cache = True
  c.shuffle_buffer = 5000


def _epoch_steps(dataset: str, batch: int, epochs: int) -> int:
  """Steps of `epochs` epochs of the catalog's training split (0 when its size is unknown)."""
  spec = catalog.DATASETS.get(dataset)
  return epochs * spec.num_train // batch if spec is not None and spec.num_train else 0


def _apply_epochs(c: ml_collections.ConfigDict, dataset: str, epochs: int,
                  warmup_epochs: int) -> None:
  """total_steps and warmup_steps from epochs; OTHER_PRETRAIN_STEPS where sizes are unknown."""
  c.total_steps = _epoch_steps(dataset, c.batch, epochs) or OTHER_PRETRAIN_STEPS
  c.warmup_steps = c.total_steps * warmup_epochs // epochs


TIMM_REPROB = 0.25  # random erasing probability (DeiT's and MAE's --reprob)


def _apply_timm_augmentation(c: ml_collections.ConfigDict) -> None:
  """The input of DeiT and MAE fine-tuning: timm's create_transform as they call it."""
  # RandomResizedCrop 8-100%, flip, rand-m9-mstd0.5-inc1, random erasing 0.25; Mixup 0.8,
  # CutMix 1.0 (switch 0.5), label smoothing 0.1; evaluation: the central 224 of the
  # shorter side resized to 256 (crop_pct 0.875).
  c.pp.train = f'pretrain|randaug(2, 9, 0.5)|erase({TIMM_REPROB})'
  c.pp.min_area = 0.08
  c.pp.flip = True
  c.pp.crop = 224
  c.pp.resize = 256
  c.pp.keep_aspect = True
  c.pp.eval = 'central_crop'
  c.pp.mixup = 0.8
  c.pp.cutmix = 1.0
  c.pp.cutmix_switch_prob = 0.5
  c.pp.label_smoothing = 0.1


# DeiT (Touvron et al. 2021; facebookresearch/deit main.py): AdamW, lr 5e-4 x batch / 512,
# batch 1024, weight decay 0.05, 300 epochs, 5 warm-up, cosine to 1e-5, no clipping,
# stochastic depth 0.1, no dropout, class token without a pre-logits layer, repeated
# augmentation (3 copies of each image; its --repeated-aug default).
DEIT_EPOCHS = 300
DEIT_WARMUP_EPOCHS = 5
DEIT_BASE_LR = 5e-4  # per 512 images
DEIT_BATCH = 1024


def apply_deit(c: ml_collections.ConfigDict, dataset: str) -> None:
  """DeiT's from-scratch recipe on dataset (epochs from the catalog's size)."""
  c.dataset = dataset
  c.optimizer = 'adam'
  c.optimizers.adam.b1, c.optimizers.adam.b2 = 0.9, 0.999
  c.optimizers.adam.eps = 1e-8
  c.batch = DEIT_BATCH
  c.batch_eval = DEIT_BATCH
  c.base_lr = DEIT_BASE_LR * c.batch / 512
  c.end_lr = 1e-5
  c.decay_type = 'cosine'
  c.weight_decay = 0.05
  c.grad_clip_norm = 0.0
  _apply_epochs(c, dataset, DEIT_EPOCHS, DEIT_WARMUP_EPOCHS)
  c.model.dropout_rate = 0.0
  c.model.stochastic_depth = 0.1
  c.model.representation_size = 0
  c.objectives.supervised.loss = 'softmax_xent'
  _apply_timm_augmentation(c)
  c.pp.repeats = 3
  c.evals.test.every = 5000
  c.checkpoint_every = 2000
  apply_imagenet_variants(c)


# DeiT's distillation (facebookresearch/deit main.py, losses.py): the student gains the
# distillation token and head (trained on the teacher's argmax in 'hard', its softened
# output in 'soft'), alpha 0.5, tau 1.0, the rest of DeiT's recipe unchanged. DeiT's
# teacher, a RegNetY-16GF (82.9% top-1), is replaced by a classifier this project reads:
# timm's ViT-B/16 AugReg2 (ImageNet-21k then 1k at 224 px, 85.1% top-1; inputs in [-1, 1]).
DISTILL_TEACHER = 'hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k'
# big_vision's "patient and consistent" form (configs/proj/distill/bit_i1k.py): the KL at
# t 1.0 alone, teacher and student on the same mixed-up crop (mixup p 1.0), 1200 epochs.
PATIENT_EPOCHS = 1200
PATIENT_MIXUP = 1.0


def apply_deit_distill(c: ml_collections.ConfigDict, dataset: str, mode: str,
                       teacher: str = DISTILL_TEACHER) -> None:
  """DeiT's recipe (apply_deit) distilled from `teacher` in `mode` (distill.MODES)."""
  distill.check_mode(mode, 'distill')
  c.objective = 'distill'
  c.objectives.distill.teacher = teacher
  c.objectives.distill.mode = mode
  c.objectives.distill.alpha = 0.5
  c.objectives.distill.tau = 1.0
  c.model.distilled = mode in ('hard', 'soft')
  if mode == 'patient':
    _apply_epochs(c, dataset, PATIENT_EPOCHS, DEIT_WARMUP_EPOCHS)
    c.pp.mixup = PATIENT_MIXUP
    c.pp.cutmix = 0.0
    c.pp.label_smoothing = 0.0  # labels are not read


# MAE fine-tuning (He et al. 2021; facebookresearch/mae FINETUNE.md and main_finetune.py,
# ViT-B): layer decay 0.65 (the paper says 0.75), AdamW lr 5e-4 x batch / 256, batch
# 1024, weight decay 0.05, 100 epochs, 5 warm-up, cosine to 1e-6, no clipping, drop path
# 0.1, global average pooling. Not built here: the fc_norm head (our pooling is the
# encoder's final norm, then the mean). Its L/H rows differ (0.75, 1e-3, 50 epochs): the
# B row is used for every model.
MAE_FT_LAYER_DECAY = 0.65
MAE_FT_BASE_LR = 5e-4  # per 256 images
MAE_FT_BATCH = 1024
MAE_FT_EPOCHS = 100
MAE_FT_WARMUP_EPOCHS = 5


def apply_mae_finetune(c: ml_collections.ConfigDict, dataset: str) -> None:
  """MAE's fine-tuning of a pre-trained encoder (config.pretrained_path) on dataset."""
  apply_deit(c, dataset)  # the same AdamW, augmentation and regularisation, then:
  c.batch = MAE_FT_BATCH
  c.batch_eval = MAE_FT_BATCH
  c.base_lr = MAE_FT_BASE_LR * c.batch / 256
  c.end_lr = 1e-6
  c.layer_decay = MAE_FT_LAYER_DECAY
  c.pp.repeats = 1  # MAE fine-tunes without repeated augmentation
  _apply_epochs(c, dataset, MAE_FT_EPOCHS, MAE_FT_WARMUP_EPOCHS)
  # Average pooling, then fc_norm: the pre-trained encoder_norm is left out, fc_norm starts
  # fresh (MAE's global_pool=True).
  c.model.classifier = 'gap'
  c.model.fc_norm = True


# AugReg ("How to train your ViT?", Steiner et al. 2021; big_vision configs/vit_i1k.py and
# vit_i21k.py): level -> (RandAugment magnitude with 2 layers, None = off; Mixup alpha).
AUGREG_LEVELS = {
    'none': (None, 0.0),
    'light1': (0, 0.0),  # randaug(2, 0) is not nothing: AutoContrast and Equalize
    'light2': (10, 0.2),
    'medium1': (15, 0.2),
    'medium2': (15, 0.5),
    'strong1': (20, 0.5),
    'strong2': (20, 0.8),
}
AUGREG_EPOCHS = 300
AUGREG_REGULARISATION = (0.0, 0.1)  # dropout = stochastic depth, the paper's two settings


def check_augreg_level(level: str) -> str:
  """`level` if it is an AugReg level, else a one-line error with the closest levels."""
  if level not in AUGREG_LEVELS:
    hint = errors.did_you_mean(level, AUGREG_LEVELS)
    raise ValueError(f'Unknown AugReg level {level!r} (' + (
        hint or f'levels: {", ".join(AUGREG_LEVELS)}') + ').')
  return level


def check_augreg_reg(reg: Any) -> float:
  """`reg` as a float if it is one of the paper's two settings, else a one-line error."""
  try:
    value = float(reg)
  except (TypeError, ValueError):
    value = None
  if value not in AUGREG_REGULARISATION:
    raise ValueError(f'AugReg reg={reg}: the paper trains with dropout and stochastic '
                     f'depth {" or ".join(map(str, AUGREG_REGULARISATION))}')
  return value


def apply_augreg_pretrain(c: ml_collections.ConfigDict, dataset: str, model: str,
                          level: str, reg: float = 0.0) -> None:
  """AugReg pre-training: Adam lr 1e-3, wd 0.1, 10k warm-up, cosine, 300 epochs, a level."""
  check_augreg_level(level)
  check_augreg_reg(reg)
  apply_pretrain(c, dataset, model)
  magnitude, alpha = AUGREG_LEVELS[level]
  c.optimizers.adam.mu_dtype = 'bfloat16'
  c.base_lr = 1e-3
  c.end_lr = 0.0
  c.decay_type = 'cosine'
  # big_vision's wd 1e-4 is not multiplied by the lr; ours is: 1e-4 / 1e-3 = 0.1.
  c.weight_decay = 0.1
  c.grad_clip_norm = 1.0
  c.warmup_steps = 10_000
  # As apply_pretrain: epochs on ImageNet; elsewhere they would not cover the warm-up.
  if dataset in PRETRAIN_TABLE:
    c.total_steps = _epoch_steps(dataset, c.batch, AUGREG_EPOCHS)
  c.model.dropout_rate = reg
  c.model.stochastic_depth = reg
  if dataset == 'imagenet21k':  # vit_i21k.py: global average pooling, no pre-logits
    c.model.classifier = 'gap'
    c.model.representation_size = 0
  c.pp.min_area = 0.05  # big_vision's inception crop
  c.pp.train = 'pretrain' + (f'|randaug(2, {magnitude})' if magnitude is not None else '')
  c.pp.mixup = alpha
