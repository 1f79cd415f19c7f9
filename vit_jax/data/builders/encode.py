"""Image encoding for the embedded builders: PIL is ~20x faster than a TF op per tiny image."""
import io

import numpy as np
from PIL import Image


def encode(image: np.ndarray, fmt: str = 'png') -> bytes:
  """Returns a uint8 [H, W] or [H, W, 1|3] image encoded as 'png' or 'jpeg' (quality 90)."""
  if image.ndim == 3 and image.shape[-1] == 1:
    image = image[..., 0]
  buf = io.BytesIO()
  if fmt == 'jpeg':
    Image.fromarray(image).save(buf, format='JPEG', quality=90)
  else:
    Image.fromarray(image).save(buf, format='PNG')
  return buf.getvalue()
