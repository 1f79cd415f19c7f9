"""RandAugment (Cubuk et al. 2019): the paper's 14 image operations as stateless TF ops.

Convention (timm's "increasing" ops, as DeiT's and MAE's rand-m9-mstd0.5-inc1): magnitude
m is on a scale where 10 is the reference strength, and every op with a magnitude is the
identity at m = 0, growing stronger with m:
  Rotate         +-30 m/10 degrees          ShearX/Y      +-0.3 m/10
  TranslateX/Y   +-0.45 m/10 of the size    Color, Contrast, Brightness, Sharpness:
  Solarize       threshold 256 - 256 m/10                 blend factor 1 +- 0.9 m/10
  Posterize      keep 8 - 4 m/10 bits (8 = identity; timm keeps 4 at m=0, see below)
Signs are random. Magnitudes above 10 extrapolate (big_vision's AugReg configs use 15 and
20), clamped where an op leaves its domain. Geometric ops fill with grey 128 (big_vision);
they resample with nearest neighbour. Each of `num_layers` ops is chosen uniformly (with
replacement) and applied with probability `prob` (timm: 0.5); `mstd` > 0 draws each op's
magnitude from N(m, mstd) clipped to [0, max(10, m)] (timm's magnitude noise).

Posterize differs from timm's on purpose: timm's increasing posterize keeps 4 bits at m = 0,
so it is never the identity; here bits = 8 - 4 m/10 (m = 10 keeps 4 bits, like timm's
weakest setting of its original-paper posterize).
"""
import math
from typing import Callable

import tensorflow as tf

from vit_jax.data.pp_registry import register

MAX_MAGNITUDE = 30.0  # The RandAugment paper's search range ends at 30.
_FILL = 128


def as_uint8(image: tf.Tensor) -> tf.Tensor:
  """Float pixel values rounded and clipped to uint8; uint8 unchanged."""
  if image.dtype == tf.uint8:
    return image
  return tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)


def gray(image: tf.Tensor) -> tf.Tensor:
  """Luma of float RGB [H, W, 3] (ITU-R 601, as PIL's 'L'), broadcastable to the image."""
  if image.shape[-1] == 1:
    return image
  return tf.tensordot(image, tf.constant([0.299, 0.587, 0.114]), 1)[..., None]


def blend(degenerate: tf.Tensor, image: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
  """degenerate + factor * (image - degenerate), clipped to uint8 (PIL's Image.blend)."""
  out = tf.cast(degenerate, tf.float32) + factor * (
      tf.cast(image, tf.float32) - tf.cast(degenerate, tf.float32))
  # Truncated, not rounded, like PIL's blend.
  return tf.cast(tf.floor(tf.clip_by_value(out, 0.0, 255.0)), tf.uint8)


def autocontrast(image: tf.Tensor) -> tf.Tensor:
  """Stretches each channel to the full 0..255 range (PIL ImageOps.autocontrast)."""
  # float64 and PIL's order of operations (x * scale - lo * scale): the same lookup table.
  x = tf.cast(image, tf.float64)
  lo = tf.reduce_min(x, axis=[0, 1], keepdims=True)
  hi = tf.reduce_max(x, axis=[0, 1], keepdims=True)
  scale = 255.0 / tf.maximum(hi - lo, 1.0)
  out = tf.where(hi > lo, tf.floor(x * scale - lo * scale), x)
  return tf.cast(tf.clip_by_value(out, 0.0, 255.0), tf.uint8)


def _equalize_channel(c: tf.Tensor) -> tf.Tensor:
  hist = tf.math.bincount(tf.cast(c, tf.int32), minlength=256, maxlength=256)
  last = tf.gather(hist, tf.reduce_max(tf.where(hist > 0)))
  step = (tf.reduce_sum(hist) - last) // 255
  lut = (tf.cumsum(hist, exclusive=True) + step // 2) // tf.maximum(step, 1)
  lut = tf.cast(tf.clip_by_value(lut, 0, 255), tf.uint8)
  return tf.where(step > 0, tf.gather(lut, tf.cast(c, tf.int32)), c)


def equalize(image: tf.Tensor) -> tf.Tensor:
  """Histogram equalisation per channel (PIL ImageOps.equalize)."""
  return tf.stack([_equalize_channel(image[..., i]) for i in range(image.shape[-1])], -1)


def solarize(image: tf.Tensor, threshold) -> tf.Tensor:
  """Inverts the pixels at or above `threshold` (PIL ImageOps.solarize)."""
  return tf.where(tf.cast(image, tf.int32) < threshold, image, 255 - image)


def posterize(image: tf.Tensor, bits) -> tf.Tensor:
  """Keeps the `bits` most significant bits of every value (PIL ImageOps.posterize)."""
  shift = tf.cast(8 - bits, tf.uint8)
  return tf.bitwise.left_shift(tf.bitwise.right_shift(image, shift), shift)


def color(image: tf.Tensor, factor) -> tf.Tensor:
  """Saturation: blend with the grey image (PIL ImageEnhance.Color)."""
  return blend(tf.round(gray(tf.cast(image, tf.float32))), image, factor)


def contrast(image: tf.Tensor, factor) -> tf.Tensor:
  """Blend with the mean grey level (PIL ImageEnhance.Contrast)."""
  mean = tf.floor(tf.reduce_mean(tf.round(gray(tf.cast(image, tf.float32)))) + 0.5)
  return blend(tf.fill(tf.shape(image), mean), image, factor)


def brightness(image: tf.Tensor, factor) -> tf.Tensor:
  """Blend with black (PIL ImageEnhance.Brightness)."""
  return blend(tf.zeros_like(image), image, factor)


def sharpness(image: tf.Tensor, factor) -> tf.Tensor:
  """Blend with PIL's SMOOTH-filtered image, borders kept (PIL ImageEnhance.Sharpness)."""
  x = tf.cast(image, tf.float32)[None]
  kernel = tf.constant([[1, 1, 1], [1, 5, 1], [1, 1, 1]], tf.float32) / 13.0
  kernel = tf.tile(kernel[:, :, None, None], [1, 1, image.shape[-1], 1])
  smooth = tf.round(tf.nn.depthwise_conv2d(x, kernel, [1, 1, 1, 1], 'VALID'))[0]
  degenerate = tf.pad(smooth, [[1, 1], [1, 1], [0, 0]])
  mask = tf.pad(tf.ones_like(smooth), [[1, 1], [1, 1], [0, 0]])
  degenerate = mask * degenerate + (1.0 - mask) * tf.cast(image, tf.float32)
  return blend(degenerate, image, factor)


def affine(image: tf.Tensor, matrix, fill: float = _FILL,
           interpolation: str = 'NEAREST') -> tf.Tensor:
  """Output pixel (x, y) takes input (a0 x + a1 y + a2, b0 x + b1 y + b2); `fill` outside."""
  return affine_rows(image[None], tf.stack(matrix)[None], fill, interpolation)[0]


def affine_rows(images: tf.Tensor, matrices: tf.Tensor, fill: float = _FILL,
                interpolation: str = 'NEAREST') -> tf.Tensor:
  """affine() of every row [B, H, W, C] with its own matrix (matrices [B, 6]), in one call."""
  matrices = tf.cast(matrices, tf.float32)
  transforms = tf.concat([matrices, tf.zeros([tf.shape(matrices)[0], 2])], 1)
  return tf.raw_ops.ImageProjectiveTransformV3(
      images=images, transforms=transforms, output_shape=tf.shape(images)[1:3],
      fill_value=float(fill), interpolation=interpolation, fill_mode='CONSTANT')


def rotate(image: tf.Tensor, degrees) -> tf.Tensor:
  """Rotates counter-clockwise about the centre (PIL Image.rotate)."""
  h = tf.cast(tf.shape(image)[0], tf.float32)
  w = tf.cast(tf.shape(image)[1], tf.float32)
  t = tf.cast(degrees, tf.float32) * (math.pi / 180.0)
  cos, sin = tf.cos(t), tf.sin(t)
  cx, cy = (w - 1) / 2, (h - 1) / 2
  # Inverse map: the input point that lands on output (x, y).
  return affine(image, [cos, -sin, cx - cos * cx + sin * cy,
                        sin, cos, cy - sin * cx - cos * cy])


def shear_x(image: tf.Tensor, s) -> tf.Tensor:
  """x_in = x + s y (PIL's AFFINE (1, s, 0, 0, 1, 0))."""
  return affine(image, [1.0, s, 0.0, 0.0, 1.0, 0.0])


def shear_y(image: tf.Tensor, s) -> tf.Tensor:
  """y_in = s x + y (PIL's AFFINE (1, 0, 0, s, 1, 0))."""
  return affine(image, [1.0, 0.0, 0.0, s, 1.0, 0.0])


def translate_x(image: tf.Tensor, pixels) -> tf.Tensor:
  """x_in = x + pixels: the content moves left by `pixels`."""
  return affine(image, [1.0, 0.0, pixels, 0.0, 1.0, 0.0])


def translate_y(image: tf.Tensor, pixels) -> tf.Tensor:
  """y_in = y + pixels: the content moves up by `pixels`."""
  return affine(image, [1.0, 0.0, 0.0, 0.0, 1.0, pixels])


def _size(image: tf.Tensor, axis: int) -> tf.Tensor:
  return tf.cast(tf.shape(image)[axis], tf.float32)


# name -> fn(image uint8, level = m/10 >= 0, sign +-1) -> uint8, in the paper's order.
OPS: dict[str, Callable] = {
    'Identity': lambda x, level, sign: x,
    'AutoContrast': lambda x, level, sign: autocontrast(x),
    'Equalize': lambda x, level, sign: equalize(x),
    'Rotate': lambda x, level, sign: rotate(x, sign * 30.0 * level),
    'Solarize': lambda x, level, sign: solarize(
        x, tf.clip_by_value(256 - tf.cast(256.0 * level, tf.int32), 0, 256)),
    'Color': lambda x, level, sign: color(x, tf.maximum(1.0 + sign * 0.9 * level, 0.0)),
    'Posterize': lambda x, level, sign: posterize(
        x, tf.clip_by_value(8 - tf.cast(4.0 * level, tf.int32), 0, 8)),
    'Contrast': lambda x, level, sign: contrast(x, tf.maximum(1.0 + sign * 0.9 * level, 0.0)),
    'Brightness': lambda x, level, sign: brightness(
        x, tf.maximum(1.0 + sign * 0.9 * level, 0.0)),
    'Sharpness': lambda x, level, sign: sharpness(
        x, tf.maximum(1.0 + sign * 0.9 * level, 0.0)),
    'ShearX': lambda x, level, sign: shear_x(x, sign * 0.3 * level),
    'ShearY': lambda x, level, sign: shear_y(x, sign * 0.3 * level),
    'TranslateX': lambda x, level, sign: translate_x(x, sign * 0.45 * level * _size(x, 1)),
    'TranslateY': lambda x, level, sign: translate_y(x, sign * 0.45 * level * _size(x, 0)),
}


def apply_op(image: tf.Tensor, index: tf.Tensor, magnitude: tf.Tensor,
             sign: tf.Tensor) -> tf.Tensor:
  """Applies OPS[index] (a scalar tensor) at `magnitude` with direction `sign`."""
  level = tf.cast(magnitude, tf.float32) / 10.0
  sign = tf.cast(sign, tf.float32)
  branches = [lambda fn=fn: fn(image, level, sign) for fn in OPS.values()]
  out = tf.switch_case(tf.cast(index, tf.int32), branches)
  out.set_shape(image.shape)
  return out


@register('randaug', random=True)
def randaug(num_layers: int = 2, magnitude: float = 9, mstd: float = 0.0,
            prob: float = 0.5) -> Callable:
  """randaug(num_layers, magnitude, mstd, prob): RandAugment on uint8 [H, W, C]."""
  if not isinstance(num_layers, int) or num_layers < 0:
    raise ValueError(f'num_layers={num_layers!r} must be an integer >= 0')
  if not 0 <= magnitude <= MAX_MAGNITUDE:
    raise ValueError(f'magnitude={magnitude!r} is out of range [0, {MAX_MAGNITUDE:g}] '
                     '(10 is the reference strength)')
  if not mstd >= 0:
    raise ValueError(f'mstd={mstd!r} must be >= 0')
  if not 0 <= prob <= 1:
    raise ValueError(f'prob={prob!r} must be in [0, 1]')
  top = max(10.0, float(magnitude))

  def fn(image: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    image = as_uint8(image)
    for layer_seed in tf.unstack(tf.random.experimental.stateless_split(seed, num_layers)):
      s = tf.unstack(tf.random.experimental.stateless_split(layer_seed, 4))
      index = tf.random.stateless_uniform([], s[0], 0, len(OPS), tf.int32)
      m = tf.clip_by_value(magnitude + mstd * tf.random.stateless_normal([], s[1]), 0.0, top)
      sign = tf.where(tf.random.stateless_uniform([], s[2]) < 0.5, -1.0, 1.0)
      apply = tf.random.stateless_uniform([], s[3]) < prob
      image = tf.cond(apply, lambda: apply_op(image, index, m, sign), lambda: image)
    return image
  return fn
