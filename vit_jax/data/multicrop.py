"""Multi-crop views (DINO, Caron et al. 2021): several augmented crops of every example.

With config.pp.multicrop.global_pp set, a training example becomes
  'image' uint8 [G, crop, crop, C]        one view per pp string of global_pp
  'local' uint8 [L, local_crop, local_crop, C]   L = local_crops views of local_pp
(pp.train is not used). View k of an example is seeded by fold_in(example seed, k), so
every random choice is a function of (seed, step, example) and resume stays exact.

The official recipe as named compositions of ops (vit_jax.data.pp_registry):
  dino_global1  inception_crop(pp.crop, global_area)|flip_lr|jitter|blur(1.0)
  dino_global2  inception_crop(pp.crop, global_area)|flip_lr|jitter|blur(0.1)|solarize(0.2)
  dino_local    inception_crop(local_crop, local_area)|flip_lr|jitter|blur(0.5)
with jitter = color_jitter(0.4, 0.4, 0.2, 0.1, p 0.8)|grayscale(0.2), blur sigma 0.1..2
and flip_lr only with pp.flip.
"""
from typing import Any

import tensorflow as tf

from vit_jax import option_rules
from vit_jax.data import pp_registry
from vit_jax.data import preprocess
from vit_jax.data import view_counts

JITTER = 'color_jitter(0.4, 0.4, 0.2, 0.1, 0.8)|grayscale(0.2)'


def _crop(pp, size: int, key: str) -> str:
  """The random resized crop, then flip_lr if pp.flip, then the colour jitter."""
  lo, hi = pp.multicrop[key]
  flip = '|flip_lr' if pp.flip else ''
  return f'inception_crop({size}, {float(lo)!r}, {float(hi)!r}){flip}|{JITTER}'


@pp_registry.register_composition('dino_global1')
def _global1(pp) -> str:
  return _crop(pp, pp.crop, 'global_area') + '|blur(1.0)'


@pp_registry.register_composition('dino_global2')
def _global2(pp) -> str:
  return _crop(pp, pp.crop, 'global_area') + '|blur(0.1)|solarize(0.2)'


@pp_registry.register_composition('dino_local')
def _local(pp) -> str:
  return _crop(pp, pp.multicrop.local_crop, 'local_area') + '|blur(0.5)'


def _chain(text: str, pp) -> pp_registry.Chain:
  if not pp_registry.decodes_first(text, pp):
    text = 'decode|' + text
  return pp_registry.build(text, pp)


_LOCAL = ('pp.multicrop.local_pp', 'pp.multicrop.local_crop', 'pp.multicrop.local_area')
# What acts only with multi-crop views on, and local views only with some (option_rules).
OPTION_RULES = (
    option_rules.Rule(('pp.multicrop.global_pp',), lambda views: not views,
                      ('pp.multicrop.local_crops', 'pp.multicrop.global_area') + _LOCAL,
                      "set pp.multicrop.global_pp (e.g. ('dino_global1', 'dino_global2'))"),
    option_rules.Rule(('pp.multicrop.local_crops',), lambda n: not n, _LOCAL,
                      'set pp.multicrop.local_crops above 0'),
)


def check(pp) -> None:
  """One-line errors for multi-crop settings that cannot work (when it is on)."""
  if not view_counts.enabled(pp):
    return
  m = pp.multicrop
  if isinstance(m.global_pp, str):
    raise ValueError(f'config.pp.multicrop.global_pp={m.global_pp!r} must be a tuple of '
                     "pp strings, one per global view, e.g. ('dino_global1', 'dino_global2').")
  local = m.local_crops
  if not isinstance(local, int) or isinstance(local, bool) or local < 0:
    raise ValueError(f'config.pp.multicrop.local_crops={local!r} must be an integer >= 0.')
  size = m.local_crop
  if local and (not isinstance(size, int) or isinstance(size, bool) or size < 1):
    raise ValueError(f'config.pp.multicrop.local_crop={size!r} must be a positive '
                     'integer (pixels).')
  if local and size > pp.crop:
    raise ValueError(f'config.pp.multicrop.local_crop={size} is larger than the global '
                     f'crop config.pp.crop={pp.crop}: local crops must be the smaller views.')
  for key in ('global_area', 'local_area'):
    area = tuple(m[key])
    if len(area) != 2 or not 0 < area[0] <= area[1] <= 1:
      raise ValueError(f'config.pp.multicrop.{key}={area!r} must be (min, max) with '
                       '0 < min <= max <= 1.')
  texts = [(f'global_pp[{i}]', t) for i, t in enumerate(m.global_pp)]
  if local:
    texts.append(('local_pp', m.local_pp))
  for key, text in texts:
    try:
      _chain(text, pp)
    except ValueError as e:
      raise ValueError(f'config.pp.multicrop.{key}={text!r}: {e}') from None


def views(data: tf.Tensor, seed: tf.Tensor, pp, scale: int = 1) -> dict[str, Any]:
  """{'image': [G, crop, crop, C], 'local': [L, s, s, C]} uint8 views of encoded bytes.

  'local' is left out when there are no local crops.
  """
  m = pp.multicrop
  enc = pp_registry.Encoded(data, pp.num_channels, scale)
  fold_in = tf.random.experimental.stateless_fold_in

  def run(text: str, k: int, size: int) -> tf.Tensor:
    image = _chain(text, pp)(enc, fold_in(seed, k))
    image = image if image.dtype == tf.uint8 else preprocess.to_uint8(image)
    return tf.ensure_shape(image, [size, size, pp.num_channels])

  out = {'image': tf.stack([run(t, k, pp.crop) for k, t in enumerate(m.global_pp)])}
  first = len(m.global_pp)
  if m.local_crops:
    out['local'] = tf.stack([run(m.local_pp, first + k, m.local_crop)
                             for k in range(m.local_crops)])
  return out
