"""The project's own TFDS builders; importing this package registers them with TFDS.

Registered names: `mnist5k`, `digits`, `synthetic`, `image_folder`, `imagenet21k`.
Each is a `tfds.core.GeneratorBasedBuilder` that prepares its TFRecords into the TFDS
data dir on first use, so it is read through exactly the code path of cifar10.
"""
from vit_jax.data.builders import digits
from vit_jax.data.builders import image_folder
from vit_jax.data.builders import mnist5k
from vit_jax.data.builders import synthetic

__all__ = ['digits', 'image_folder', 'mnist5k', 'synthetic']
