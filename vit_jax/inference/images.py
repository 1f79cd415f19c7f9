"""Image files as model inputs: any size or mode, resized to the model's resolution."""
import os

import numpy as np
from PIL import Image
from PIL import ImageOps
from PIL import UnidentifiedImageError

from vit_jax import errors


# 16-bit grayscale PNGs open in these modes; PIL's RGB conversion would clip them to
# 255 (almost all white), so they are scaled as TensorFlow's PNG decoder does.
_WIDE_GRAY = ('I;16', 'I;16B', 'I;16L', 'I;16N', 'I')


def _wide_gray(img: Image.Image, resolution: int) -> np.ndarray:
  """A 16-bit grayscale image as float32 RGB in [-1, 1], resized bilinearly."""
  values = np.asarray(img).astype(np.float32) / 65535.0
  img = Image.fromarray(values, 'F').resize((resolution, resolution), Image.BILINEAR)
  gray = np.clip(np.asarray(img, np.float32), 0.0, 1.0) * 2.0 - 1.0
  return np.repeat(gray[..., None], 3, axis=-1)


def load_image(path: str, resolution: int) -> np.ndarray:
  """Reads a JPEG/PNG (any size or mode) as float32 [resolution, resolution, 3] in [-1, 1].

  Resized bilinearly with no crop (the original vit_jax evaluation).
  """
  path = os.fspath(path)
  if not os.path.exists(path):
    raise FileNotFoundError(f'Image {path} does not exist; check the path.')
  if os.path.isdir(path):
    raise IsADirectoryError(f'Image {path} is a directory; pass image files.')
  try:
    with Image.open(path) as img:
      # Phone photos store their rotation in EXIF; apply it as a viewer would.
      img = ImageOps.exif_transpose(img)
      if img.mode in _WIDE_GRAY:
        return _wide_gray(img, resolution)
      img = img.convert('RGB').resize((resolution, resolution), Image.BILINEAR)
  except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
    raise ValueError(f'Cannot read image {path} ({errors.first_line(e)}); pass a valid JPEG or '
                     'PNG file.') from None
  return np.asarray(img, np.float32) / 127.5 - 1.0
