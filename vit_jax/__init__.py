"""vit_jax: Vision Transformer pre-training and fine-tuning in JAX/Flax."""
__version__ = '0.1.0'
