"""Prints the recipe table of docs/guides/recipes.md from the resolved configs: python tools/recipe_table.py."""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from vit_jax import configs  # pylint: disable=g-import-not-at-top,wrong-import-position
from vit_jax import models  # pylint: disable=g-import-not-at-top,wrong-import-position

AUGREG = 'L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1'
SPECS = (
    'vit.py:b16,cifar10', 'vit.py:b32,cifar10', 'vit.py:l16,cifar100',
    'vit.py:l16,imagenet2012', 'vit.py:b16,oxford_iiit_pet',
    'vit.py:b16,oxford_flowers102', 'vit.py:b16,vtab/dtd',
    f'augreg.py:{AUGREG},oxford_iiit_pet',
    'pretrain.py:b16,imagenet2012', 'pretrain.py:b16,imagenet21k',
    'pretrain.py:l16,imagenet21k',
    'augreg_pretrain.py:b16,imagenet2012,medium2', 'deit.py:s16,imagenet2012',
    'mae_finetune.py:b16,imagenet2012',
)
HEADER = ('| config | model | dataset | lr | wd | decay | steps (warm-up) | clip '
          '| dropout | momentum | train crop | eval | train split / minival |\n'
          '|---|---|---|---|---|---|---|---|---|---|---|---|---|')


def _dropout(c) -> str:
  if c.model.dropout_rate is not None:  # None: the preset's
    rate = c.model.dropout_rate
  else:
    preset = models.get_model_config(c.model_name)
    rate = preset.transformer.dropout_rate if 'transformer' in preset else 0.0
  depth = c.model.stochastic_depth
  return f'{rate:g}' + (f' (stochastic depth {depth:g})' if depth else '')


def _lr(c) -> str:
  return f'{c.base_lr:g}' + (f' (layer decay {c.layer_decay:g})' if c.layer_decay != 1 else '')


def _decay(c) -> str:
  if c.end_lr == -1:  # the original's rule
    return f'{c.decay_type} to 0 (linear: to 1e-5)'
  return f'{c.decay_type} to {c.end_lr:g}'


def _crop(c) -> str:
  pp = c.pp
  recipe, *ops = pp.train.split('|')
  if recipe in ('pretrain', 'finetune_inception'):
    out = f'inception {pp.min_area:.0%}-100%, {pp.crop}px' + (', flip' if pp.flip else '')
  else:
    out = f'{pp.resize} -> random {pp.crop}' + (', flip' if pp.flip else '')
  out += ''.join(f', `{op}`' for op in ops)
  mixing = [f'{k} {pp[k]:g}' for k in ('mixup', 'cutmix') if pp.get(k)]
  smoothing = [f'smoothing {pp.label_smoothing:g}'] if pp.label_smoothing else []
  repeats = [f'{pp.repeats} copies'] if pp.get('repeats', 1) > 1 else []
  return out + ''.join(f'; {x}' for x in mixing + smoothing + repeats)


def _eval(c) -> str:
  pp = c.pp
  if pp.eval == 'resize':
    return f'resize to {pp.crop}'
  side = 'short side ' if pp.keep_aspect else ''
  return f'{side}{pp.resize}, centre {pp.crop}'


def _splits(c) -> str:
  minival = c.evals.minival
  held = f' / `{minival.split}`' if minival.every >= 0 else ''
  return f'`{c.train_split}`{held}' if c.train_split else f'default{held}'


def row(spec: str) -> str:
  """One markdown row describing the resolved config of configs/SPEC."""
  c = configs.load(os.path.join(REPO, 'configs', spec))
  name = spec if len(spec) < 40 else spec.replace(AUGREG, 'L_16-...-do_0.1-sd_0.1')
  momentum = (c.optimizers.sgd.accumulator_dtype if c.optimizer == 'sgd'
              else f'adam {c.optimizers.adam.mu_dtype}')
  return (f'| `{name}` | {c.model_name} | {c.dataset} | {_lr(c)} | '
          f'{c.weight_decay:g} | {_decay(c)} | '
          f'{c.total_steps:,} ({c.warmup_steps:,}) | {c.grad_clip_norm:g} | '
          f'{_dropout(c)} | {momentum} | {_crop(c)} | {_eval(c)} | {_splits(c)} |')


def table() -> str:
  """The whole table, header included."""
  return '\n'.join([HEADER] + [row(s) for s in SPECS])


if __name__ == '__main__':
  print(table())
