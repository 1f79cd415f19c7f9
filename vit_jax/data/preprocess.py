"""Per-example ops of the input pipeline: decode, crop, resize, flip, targets, mixing draws.

All ops are TensorFlow and run inside tf.data on the host. Every random op is stateless and
takes an explicit seed (an int64 [2] tensor), so an example's augmentation is a function of
its seed alone: that is what makes the training stream reproducible and resumable.

Images leave the host as uint8 (resized values rounded, as big_vision does): a quarter of the
bytes of float32 to batch, copy and send to the devices. The map to float32 in [-1, 1] and
mixup run on the devices (vit_jax.data.pipeline).

config.pp.train and config.pp.eval are pp strings: ops by name joined by "|"
(vit_jax.data.pp_registry), e.g. 'pretrain|randaug(2, 9, 0.5)|erase(0.25)'. The ops of this
module are the geometric ones; vit_jax.data.augment and vit_jax.data.randaug add the rest.
The recipes are named compositions of them, expanded from the other pp fields:
  pretrain            inception_crop(pp.crop, pp.min_area) (area min_area..100%, aspect
                      3/4..4/3), then flip_lr if pp.flip: the paper's pre-training recipe.
  finetune_inception  the same, used for fine-tuning: the original vit_jax's fine-tuning
                      recipe (configs/vit.py, configs/augreg.py).
  finetune            decode|resize(pp.resize)|pad(pp.pad)|random_crop(pp.crop), then
                      flip_lr if pp.flip.
  central_crop (eval) resize(pp.resize)|central_crop(pp.crop) (pre-training recipes, with
                      pp.keep_aspect).
  resize (eval)       resize(pp.crop): the original vit_jax evaluation.
Resizing squashes to a square like the original vit_jax; pp.keep_aspect resizes the shorter
side instead. A training chain that does not start with a decoding op gets `decode` first.
"""
from typing import Callable, Optional

import numpy as np
import tensorflow as tf

# The other op modules register their ops on import.
from vit_jax import option_rules
from vit_jax.data import augment  # pylint: disable=unused-import
from vit_jax.data import pp_registry
from vit_jax.data import randaug  # pylint: disable=unused-import
from vit_jax.data.pp_registry import register


def decode(data: tf.Tensor, channels: int = 3) -> tf.Tensor:
  """Decodes JPEG/PNG/GIF/BMP bytes to uint8 [H, W, channels] (grayscale becomes RGB)."""
  image = tf.io.decode_image(data, channels=channels, expand_animations=False)
  image.set_shape([None, None, channels])
  return image


def _scale(image: tf.Tensor, scale: int) -> tf.Tensor:
  return image if scale == 1 else image * tf.constant(scale, image.dtype)


def _sample_box(image_shape: tf.Tensor, seed: tf.Tensor, min_area: float,
                max_area: float = 1.0):
  begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
      image_shape, bounding_boxes=tf.zeros([0, 0, 4], tf.float32), seed=seed,
      min_object_covered=0.0, aspect_ratio_range=(3 / 4, 4 / 3),
      area_range=(min_area, max_area), use_image_if_no_bounding_boxes=True)
  return begin, size


def inception_crop(data: tf.Tensor, seed: tf.Tensor, min_area: float, size: int,
                   channels: int = 3, scale: int = 1, max_area: float = 1.0) -> tf.Tensor:
  """Decodes a random crop of area min_area..max_area, resized to float32 [size, size, C]."""

  def jpeg():
    # Decodes only the crop window: much less work than decoding the whole JPEG.
    begin, crop = _sample_box(tf.image.extract_jpeg_shape(data), seed, min_area, max_area)
    window = tf.stack([begin[0], begin[1], crop[0], crop[1]])
    return tf.image.decode_and_crop_jpeg(data, window, channels=channels)

  def other():
    image = decode(data, channels)
    begin, crop = _sample_box(tf.shape(image), seed, min_area, max_area)
    return tf.slice(image, begin, crop)

  image = tf.cond(tf.io.is_jpeg(data), jpeg, other)
  image.set_shape([None, None, channels])
  return tf.image.resize(_scale(image, scale), [size, size])


def resize(image: tf.Tensor, size: int, keep_aspect: bool = False) -> tf.Tensor:
  """Resizes to float32 [size, size] or, with keep_aspect, the shorter side to size."""
  if not keep_aspect:
    return tf.image.resize(image, [size, size])
  hw = tf.cast(tf.shape(image)[:2], tf.float32)
  # Rounded like big_vision's resize_small; the maximum keeps float error off the short side.
  new_hw = tf.cast(tf.math.round(hw * (size / tf.reduce_min(hw))), tf.int32)
  return tf.image.resize(image, tf.maximum(new_hw, size))


def central_crop(image: tf.Tensor, size: int) -> tf.Tensor:
  """Returns the central [size, size] window of an image at least that large."""
  h, w = tf.shape(image)[0], tf.shape(image)[1]
  return image[(h - size) // 2:(h - size) // 2 + size,
               (w - size) // 2:(w - size) // 2 + size]


def to_uint8(image: tf.Tensor) -> tf.Tensor:
  """Rounds resized float pixels back to uint8."""
  return tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)


@register('decode', decodes=True)
def _decode_op() -> Callable:
  """decode: the whole image, uint8 [H, W, C] times the dataset's pixel scale."""
  return lambda enc: _scale(decode(enc.data, enc.channels), enc.scale)


@register('inception_crop', random=True, decodes=True)
def _inception_crop_op(size: int, min_area: float = 0.05, max_area: float = 1.0) -> Callable:
  """inception_crop(size, min_area, max_area): a random crop of that share of the area."""
  _check_size('size', size)
  if not 0 < min_area <= max_area <= 1:
    raise ValueError(f'min_area={min_area!r}, max_area={max_area!r}: need '
                     '0 < min_area <= max_area <= 1')
  return lambda enc, seed: inception_crop(enc.data, seed, min_area, size, enc.channels,
                                          enc.scale, max_area)


@register('resize')
def _resize_op(size: int, keep_aspect: bool = False) -> Callable:
  """resize(size, keep_aspect): to [size, size], or the shorter side to size."""
  _check_size('size', size)
  return lambda image: resize(image, size, keep_aspect)


@register('pad')
def _pad_op(pixels: int) -> Callable:
  """pad(pixels): zero pixels added on every side."""
  if not isinstance(pixels, int) or pixels < 0:
    raise ValueError(f'pixels={pixels!r} must be an integer >= 0')
  return lambda image: tf.pad(image, [[pixels, pixels], [pixels, pixels], [0, 0]])


@register('random_crop', random=True)
def _random_crop_op(size: int) -> Callable:
  """random_crop(size): a random [size, size] window."""
  _check_size('size', size)
  return lambda image, seed: tf.image.stateless_random_crop(
      image, tf.concat([[size, size], tf.shape(image)[2:]], 0), seed)


@register('central_crop')
def _central_crop_op(size: int) -> Callable:
  """central_crop(size): the central [size, size] window."""
  _check_size('size', size)
  return lambda image: central_crop(image, size)


@register('flip_lr', random=True)
def _flip_lr_op() -> Callable:
  """flip_lr: a horizontal flip with probability 1/2."""
  return tf.image.stateless_random_flip_left_right


def _check_size(name: str, size) -> None:
  if not isinstance(size, int) or isinstance(size, bool) or size < 1:
    raise ValueError(f'{name}={size!r} must be a positive integer (pixels)')


def _flip(pp) -> str:
  return '|flip_lr' if pp.flip else ''


@pp_registry.register_composition('pretrain')
@pp_registry.register_composition('finetune_inception')
def _inception_recipe(pp) -> str:
  return f'inception_crop({pp.crop}, {float(pp.min_area)!r})' + _flip(pp)


@pp_registry.register_composition('finetune')
def _finetune_recipe(pp) -> str:
  pad = pp.get('pad', 0)
  return (f'decode|resize({pp.resize}, {bool(pp.get("keep_aspect"))})'
          + (f'|pad({pad})' if pad else '') + f'|random_crop({pp.crop})' + _flip(pp))


@pp_registry.register_composition('central_crop')
def _central_crop_recipe(pp) -> str:
  return f'resize({pp.resize}, {bool(pp.get("keep_aspect"))})|central_crop({pp.crop})'


@pp_registry.register_composition('resize')
def _resize_recipe(pp) -> str:
  return f'resize({pp.crop})'


def _train_text(pp) -> str:
  return pp.train if pp_registry.decodes_first(pp.train, pp) else 'decode|' + pp.train


def train_chains(pp, decoded: bool = False
                 ) -> tuple[pp_registry.Chain, Optional[pp_registry.BatchChain]]:
  """The pp.train ops: (per-example chain (Encoded, seed) -> image, batch ops or None).

  With decoded=True the per-example chain takes decoded images (see decodes_whole).
  Bad or misplaced ops raise one line naming config.pp.train.
  """
  try:
    return pp_registry.build_split(_train_text(pp), pp, decoded=decoded)
  except ValueError as e:
    raise ValueError(f'config.pp.train={pp.train!r}: {e}') from None


def decodes_whole(pp) -> bool:
  """Whether pp.train starts by decoding whole images (so they may be decoded once, cached)."""
  return pp_registry.first_op(_train_text(pp), pp) == 'decode'


def decode_op(data: tf.Tensor, pp, scale: int = 1) -> tf.Tensor:
  """The `decode` op of pp.train on encoded bytes: uint8 [H, W, pp.num_channels] x scale."""
  return _decode_op()(pp_registry.Encoded(data, pp.num_channels, scale))


def train_chain(pp) -> pp_registry.Chain:
  """The per-example pp.train ops as one function (Encoded, seed) -> image."""
  return train_chains(pp)[0]


def eval_chain(pp) -> pp_registry.Chain:
  """The pp.eval ops as one function image -> image; bad or random ops raise one line."""
  try:
    return pp_registry.build(pp.eval, pp, train=False)
  except ValueError as e:
    raise ValueError(f'config.pp.eval={pp.eval!r}: {e}') from None


def train_image(data: tf.Tensor, seed: tf.Tensor, pp, scale: int = 1,
                decoded: bool = False) -> tf.Tensor:
  """Applies the per-example pp.train ops to encoded bytes (decoded: an image): uint8."""
  example = train_chains(pp, decoded)[0]
  image = example(data if decoded else pp_registry.Encoded(data, pp.num_channels, scale), seed)
  return image if image.dtype == tf.uint8 else to_uint8(image)


def eval_uint8(image: tf.Tensor, pp) -> tf.Tensor:
  """Applies the pp.eval ops to a decoded image: uint8 [crop, crop, C]."""
  out = eval_chain(pp)(image)
  out.set_shape([pp.crop, pp.crop, image.shape[-1]])
  return out if out.dtype == tf.uint8 else to_uint8(out)


def eval_image(image: tf.Tensor, pp) -> tf.Tensor:
  """Applies the pp.eval ops to a decoded image: float32 [crop, crop, C] in [-1, 1]."""
  return tf.clip_by_value(tf.cast(eval_uint8(image, pp), tf.float32) / 127.5 - 1.0, -1.0, 1.0)


def targets(label: tf.Tensor, num_classes: int, multi_hot: bool = False,
            smoothing: float = 0.0) -> tf.Tensor:
  """One-hot (or multi-hot for a label list) float32 [num_classes], optionally smoothed."""
  if multi_hot:
    y = tf.reduce_max(tf.one_hot(tf.reshape(label, [-1]), num_classes), axis=0)
  else:
    y = tf.one_hot(label, num_classes)
  if smoothing:
    y = y * (1.0 - smoothing) + smoothing / num_classes
  return y


def mixup_ratio(seed: tf.Tensor, alpha: float) -> tf.Tensor:
  """Draws the mixing weight lambda ~ Beta(alpha, alpha) from a stateless seed."""
  g = tf.random.stateless_gamma([2], seed=seed, alpha=alpha)
  return g[0] / (g[0] + g[1])


def cutmix_box(seed: tf.Tensor, alpha: float, size: int) -> tuple[tf.Tensor, tf.Tensor]:
  """A CutMix box [top, left, height, width] in a size x size image and its label weight.

  As timm's rand_bbox: lambda ~ Beta(alpha, alpha), a box of sides size * sqrt(1 - lambda)
  centred uniformly and clipped to the image; the label weight is the uncovered fraction.
  """
  ratio_seed, y_seed, x_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
  cut = tf.cast(size * tf.sqrt(1.0 - mixup_ratio(ratio_seed, alpha)), tf.int32)
  cy = tf.random.stateless_uniform([], y_seed, 0, size, tf.int32)
  cx = tf.random.stateless_uniform([], x_seed, 0, size, tf.int32)
  top, bottom = tf.maximum(cy - cut // 2, 0), tf.minimum(cy + cut // 2, size)
  left, right = tf.maximum(cx - cut // 2, 0), tf.minimum(cx + cut // 2, size)
  weight = 1.0 - tf.cast((bottom - top) * (right - left), tf.float32) / float(size * size)
  return tf.stack([top, left, bottom - top, right - left]), weight


# timm's switch between the two acts only when both draw (vit_jax.option_rules).
OPTION_RULES = (
    option_rules.Rule(('pp.mixup', 'pp.cutmix'), lambda mixup, cutmix: not (mixup and cutmix),
                      ('pp.cutmix_switch_prob',), 'set both pp.mixup and pp.cutmix above 0'),
)


def mix_params(seed: tf.Tensor, pp) -> dict[str, tf.Tensor]:
  """The batch-mixing draw of one shard's rows at one step: Mixup or CutMix (timm's switch).

  {'ratio': label weight}, and with pp.cutmix also 'image_ratio' (the pixel weight outside
  the box) and 'box' ([top, left, height, width], empty for a Mixup draw). Mixup alone draws
  exactly what it drew before CutMix existed.
  """
  if not pp.get('cutmix', 0.0):
    return {'ratio': mixup_ratio(seed, pp.mixup)}
  switch_seed, mixup_seed, cutmix_seed = tf.unstack(
      tf.random.experimental.stateless_split(seed, 3))
  box, cut_weight = cutmix_box(cutmix_seed, pp.cutmix, pp.crop)
  if not pp.mixup:
    return {'ratio': cut_weight, 'image_ratio': tf.constant(1.0), 'box': box}
  lam = mixup_ratio(mixup_seed, pp.mixup)
  use_cutmix = tf.random.stateless_uniform([], switch_seed) < pp.cutmix_switch_prob
  return {'ratio': tf.where(use_cutmix, cut_weight, lam),
          'image_ratio': tf.where(use_cutmix, 1.0, lam),
          'box': tf.where(use_cutmix, box, tf.zeros_like(box))}


def _clevr_count(f):
  return tf.size(f['objects']['size']) - 3


def _clevr_distance(f):
  dist = tf.reduce_min(f['objects']['pixel_coords'][:, 2])
  thresholds = np.array([0.0, 8.0, 8.5, 9.0, 9.5, 10.0, 100.0], np.float32)
  return tf.reduce_max(tf.where((thresholds - dist) < 0))


def _kitti_distance(f):
  vehicles = tf.where(f['objects']['type'] < 3)  # Car, Van, Truck.
  z = tf.gather(f['objects']['location'][:, 2], vehicles)
  dist = tf.reduce_min(tf.concat([z, tf.constant([[1000.0]])], axis=0))
  # Three distance bins plus one for "no vehicle" (z = 1000).
  thresholds = np.array([-100.0, 8.0, 20.0, 999.0], np.float32)
  return tf.reduce_max(tf.where((thresholds - dist) < 0))


def _binned(key: str, factor: float):
  return lambda f: tf.cast(tf.math.floordiv(tf.cast(f[key], tf.float32), factor), tf.int64)


# VTAB-1k labels derived from other features (as defined by google-research/task_adaptation).
LABEL_FNS: dict[str, Callable[[dict], tf.Tensor]] = {
    'clevr_count': _clevr_count,
    'clevr_distance': _clevr_distance,
    'kitti_distance': _kitti_distance,
    'dsprites_location': _binned('label_x_position', 32 / 16),
    'dsprites_orientation': _binned('label_orientation', 40 / 16),
}
