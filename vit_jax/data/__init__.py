"""Embedded TFDS datasets and image folders; importing this package registers the builders.

Registered names: `mnist5k`, `digits`, `synthetic`, `image_folder`, `imagenet21k`.
Each is a `tfds.core.GeneratorBasedBuilder` that prepares its TFRecords into the TFDS
data dir on first use, so it is read through exactly the code path of cifar10.
"""
from vit_jax.data import digits
from vit_jax.data import image_folder
from vit_jax.data import mnist5k
from vit_jax.data import synthetic

__all__ = ['digits', 'image_folder', 'mnist5k', 'synthetic']
