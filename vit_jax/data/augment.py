"""Random ops by name: colour jitter, grayscale, blur, solarisation, erasing, affine warps.

Each is a random op of the pp string (vit_jax.data.pp_registry) on images with values in
0..255 (uint8, or float straight from a resize), returning uint8; each applies with a
probability `prob` drawn from its own stateless seed.
"""
import math
from typing import Callable, Union

import tensorflow as tf

from vit_jax.data import pp_registry
from vit_jax.data import randaug
from vit_jax.data.pp_registry import register


def _check_prob(prob) -> None:
  if not 0 <= prob <= 1:
    raise ValueError(f'prob={prob!r} must be in [0, 1]')


def _maybe(prob: float, seed: tf.Tensor, image: tf.Tensor, fn: Callable) -> tf.Tensor:
  """fn(image) with probability prob, else the image (as uint8 either way)."""
  image = randaug.as_uint8(image)
  applied = lambda: randaug.as_uint8(fn(image))  # noqa: E731
  if prob >= 1:  # a uniform draw in [0, 1) is always below 1: no draw and no branch
    out = applied()
  else:
    out = tf.cond(tf.random.stateless_uniform([], seed) < prob, applied, lambda: image)
  out.set_shape(image.shape)
  return out


@register('color_jitter', random=True)
def color_jitter(brightness: float = 0.4, contrast: float = 0.4, saturation: float = 0.4,
                 hue: float = 0.1, prob: float = 0.8) -> Callable:
  """color_jitter(brightness, contrast, saturation, hue, prob): torchvision's ColorJitter."""
  for name, value in (('brightness', brightness), ('contrast', contrast),
                      ('saturation', saturation)):
    if not 0 <= value < 1:
      raise ValueError(f'{name}={value!r} must be in [0, 1)')
  if not 0 <= hue <= 0.5:
    raise ValueError(f'hue={hue!r} must be in [0, 0.5]')
  _check_prob(prob)

  def jitter(image: tf.Tensor, seeds) -> tf.Tensor:
    # Factors uniform in [1 - x, 1 + x] and a hue shift in [-hue, hue], in this fixed order
    # (torchvision shuffles the order; a fixed one keeps the op a pure function of its seed).
    def factor(s, x):
      return tf.random.stateless_uniform([], s, 1.0 - x, 1.0 + x)
    x = randaug.brightness(image, factor(seeds[0], brightness))
    x = randaug.contrast(x, factor(seeds[1], contrast))
    x = randaug.color(x, factor(seeds[2], saturation))
    if hue and image.shape[-1] == 3:
      delta = tf.random.stateless_uniform([], seeds[3], -hue, hue)
      x = tf.image.adjust_hue(tf.cast(x, tf.float32) / 255.0, delta) * 255.0
    return x

  def fn(image: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    seeds = tf.unstack(tf.random.experimental.stateless_split(seed, 5))
    return _maybe(prob, seeds[4], image, lambda x: jitter(x, seeds))
  return fn


@register('grayscale', random=True)
def grayscale(prob: float = 0.2) -> Callable:
  """grayscale(prob): the luma in every channel, with probability prob."""
  _check_prob(prob)

  def gray(image: tf.Tensor) -> tf.Tensor:
    luma = tf.round(randaug.gray(tf.cast(image, tf.float32)))
    return tf.broadcast_to(luma, tf.shape(image))
  return lambda image, seed: _maybe(prob, seed, image, gray)


@register('solarize', random=True)
def solarize(prob: float = 0.2, threshold: int = 128) -> Callable:
  """solarize(prob, threshold): inverts values >= threshold, with probability prob (BYOL)."""
  _check_prob(prob)
  if not 0 <= threshold <= 256:
    raise ValueError(f'threshold={threshold!r} must be in [0, 256]')
  return lambda image, seed: _maybe(prob, seed, image,
                                    lambda x: randaug.solarize(x, threshold))


def gaussian_blur(image: tf.Tensor, sigma: tf.Tensor, radius: int) -> tf.Tensor:
  """Separable Gaussian blur of standard deviation sigma (pixels), edges reflected."""
  t = tf.range(-radius, radius + 1, dtype=tf.float32)
  k = tf.exp(-0.5 * tf.square(t / sigma))
  k /= tf.reduce_sum(k)
  channels = image.shape[-1]
  x = tf.pad(tf.cast(image, tf.float32)[None],
             [[0, 0], [radius, radius], [radius, radius], [0, 0]], mode='REFLECT')
  x = tf.nn.depthwise_conv2d(x, tf.tile(k[:, None, None, None], [1, 1, channels, 1]),
                             [1, 1, 1, 1], 'VALID')
  x = tf.nn.depthwise_conv2d(x, tf.tile(k[None, :, None, None], [1, 1, channels, 1]),
                             [1, 1, 1, 1], 'VALID')
  return x[0]


@register('blur', random=True)
def blur(prob: float = 0.5, sigma_min: float = 0.1, sigma_max: float = 2.0) -> Callable:
  """blur(prob, sigma_min, sigma_max): Gaussian blur, sigma uniform in [min, max] pixels."""
  _check_prob(prob)
  if not 0 < sigma_min <= sigma_max:
    raise ValueError(f'sigma_min={sigma_min!r}, sigma_max={sigma_max!r}: need '
                     '0 < sigma_min <= sigma_max')
  radius = max(1, math.ceil(3 * sigma_max))  # the kernel covers +-3 sigma

  def fn(image: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    sigma_seed, apply_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    sigma = tf.random.stateless_uniform([], sigma_seed, sigma_min, sigma_max)
    return _maybe(prob, apply_seed, image, lambda x: gaussian_blur(x, sigma, radius))
  return fn


# timm's RandomErasing 'pixel' mode fills with N(0, 1) per pixel in ImageNet-normalised
# space: in pixels that is about N(mean, (0.226 * 255)^2); we centre it on mid-grey.
_ERASE_MEAN, _ERASE_STD = 127.5, 0.226 * 255
_ERASE_ATTEMPTS = 10  # timm's


@register('erase', random=True)
def erase(prob: float = 0.25, min_area: float = 0.02, max_area: float = 1 / 3,
          min_aspect: float = 0.3) -> Callable:
  """erase(prob, min_area, max_area, min_aspect): timm's RandomErasing, per-pixel noise."""
  _check_prob(prob)
  if not 0 < min_area <= max_area <= 1:
    raise ValueError(f'min_area={min_area!r}, max_area={max_area!r}: need '
                     '0 < min_area <= max_area <= 1')
  if not 0 < min_aspect <= 1:
    raise ValueError(f'min_aspect={min_aspect!r} must be in (0, 1]')
  log_aspect = (math.log(min_aspect), -math.log(min_aspect))

  def box(image: tf.Tensor, seed: tf.Tensor) -> list[tf.Tensor]:
    """[top, left, height, width] of the first of 10 tries that fits (timm's); 0 x 0 if none."""
    s = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    h, w = tf.shape(image)[0], tf.shape(image)[1]
    area = tf.cast(h * w, tf.float32) * tf.random.stateless_uniform(
        [_ERASE_ATTEMPTS], s[0], min_area, max_area)
    aspect = tf.exp(tf.random.stateless_uniform([_ERASE_ATTEMPTS], s[1], *log_aspect))
    bh = tf.cast(tf.round(tf.sqrt(area * aspect)), tf.int32)
    bw = tf.cast(tf.round(tf.sqrt(area / aspect)), tf.int32)
    fits = (bh < h) & (bw < w) & (bh > 0) & (bw > 0)
    i = tf.argmax(tf.cast(fits, tf.int32))
    bh, bw = tf.where(fits[i], bh[i], 0), tf.where(fits[i], bw[i], 0)
    u = tf.random.stateless_uniform([2], s[2])
    top = tf.cast(u[0] * tf.cast(h - bh + 1, tf.float32), tf.int32)
    left = tf.cast(u[1] * tf.cast(w - bw + 1, tf.float32), tf.int32)
    return [top, left, bh, bw]

  def fn(image: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    box_seed, noise_seed, apply_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, 3))

    def erase_box(x):
      top, left, bh, bw = box(x, box_seed)
      h, w = tf.shape(x)[0], tf.shape(x)[1]
      # Noise for the box only (drawing it for the whole image costs more than RandAugment).
      noise = _ERASE_MEAN + _ERASE_STD * tf.random.stateless_normal(
          tf.stack([bh, bw, tf.shape(x)[2]]), noise_seed)
      patch = tf.pad(randaug.as_uint8(noise), [[top, h - top - bh], [left, w - left - bw],
                                               [0, 0]])
      rows, cols = tf.range(h)[:, None, None], tf.range(w)[None, :, None]
      inside = (rows >= top) & (rows < top + bh) & (cols >= left) & (cols < left + bw)
      return tf.where(inside, patch, x)
    return _maybe(prob, apply_seed, image, erase_box)
  return fn


Scalar = Union[tf.Tensor, float]


def inverse_affine(degrees: Scalar, tx: Scalar, ty: Scalar, scale: Scalar, shear: Scalar,
                   height: Scalar, width: Scalar) -> list:
  """The input-from-output map of a warp about the centre, as randaug.affine takes it.

  Forward: rotate by `degrees` counter-clockwise (as PIL and torchvision), shear x by
  `shear` degrees, scale by `scale`, then move by (tx, ty) pixels.
  """
  t = tf.cast(degrees, tf.float32) * (math.pi / 180.0)
  cos, sin = tf.cos(t), tf.sin(t)
  tan = tf.tan(tf.cast(shear, tf.float32) * (math.pi / 180.0))
  s = tf.cast(scale, tf.float32)
  a = [(cos - tan * sin) / s, (-sin - tan * cos) / s, sin / s, cos / s]
  cx = (tf.cast(width, tf.float32) - 1) / 2
  cy = (tf.cast(height, tf.float32) - 1) / 2
  px, py = cx + tf.cast(tx, tf.float32), cy + tf.cast(ty, tf.float32)
  return [a[0], a[1], cx - a[0] * px - a[1] * py,
          a[2], a[3], cy - a[2] * px - a[3] * py]


def _pair(name: str, value, low: float, high: float) -> tuple:
  pair = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
  if len(pair) != 2 or not all(isinstance(v, (int, float)) and low <= v <= high
                               for v in pair):
    raise ValueError(f'{name}={value!r} must be a number or two numbers in [{low:g}, {high:g}]')
  return pair


@register('random_affine', batched=True)
def random_affine(degrees: float = 0.0, translate=0.0, scale=(1.0, 1.0),
                  shear: float = 0.0, fill: int = 0, interpolation: str = 'nearest',
                  prob: float = 1.0) -> Callable:
  """random_affine(degrees, translate, scale, shear, ...): torchvision's RandomAffine, batched."""
  # As torchvision: angle and x-shear uniform in +-degrees/+-shear, a shift of up to
  # translate * size pixels per axis (rounded; one number or (x, y)), scale uniform in
  # [scale[0], scale[1]]; pixels from outside the image are `fill`. A batch op: one
  # projective-transform call warps all rows, each with its own draws.
  if not 0 <= degrees <= 180:
    raise ValueError(f'degrees={degrees!r} must be in [0, 180]')
  if not 0 <= shear < 90:
    raise ValueError(f'shear={shear!r} must be in [0, 90) degrees')
  frac_x, frac_y = _pair('translate', translate, 0.0, 1.0)
  if not isinstance(scale, (tuple, list)) or len(scale) != 2 or not 0 < scale[0] <= scale[1]:
    raise ValueError(f'scale={scale!r} must be (min, max) with 0 < min <= max')
  if not 0 <= fill <= 255:
    raise ValueError(f'fill={fill!r} must be in [0, 255]')
  if interpolation not in ('nearest', 'bilinear'):
    raise ValueError(f"interpolation={interpolation!r} must be 'nearest' or 'bilinear'")
  _check_prob(prob)

  def fn(images: tf.Tensor, seeds: tf.Tensor) -> tf.Tensor:
    seeds = tf.reshape(seeds, [-1, 2])  # one block per seed
    n, h, w = tf.shape(images)[0], tf.shape(images)[1], tf.shape(images)[2]
    u = pp_registry.block_uniform(seeds, n // seeds.shape[0], 6)

    def uniform(k, low, high):
      return low + (high - low) * u[k]
    matrix = inverse_affine(
        uniform(0, -degrees, degrees),
        tf.round(uniform(1, -1.0, 1.0) * frac_x * tf.cast(w, tf.float32)),
        tf.round(uniform(2, -1.0, 1.0) * frac_y * tf.cast(h, tf.float32)),
        uniform(3, scale[0], scale[1]), uniform(4, -shear, shear), h, w)
    warped = randaug.as_uint8(randaug.affine_rows(
        tf.cast(images, tf.float32), tf.stack(matrix, 1), fill, interpolation.upper()))
    if prob < 1:
      keep = u[5] >= prob
      warped = tf.where(keep[:, None, None, None], randaug.as_uint8(images), warped)
    warped.set_shape(images.shape)
    return warped
  return fn
