"""vit_jax: Vision Transformer pre-training and fine-tuning in JAX/Flax.

Stages, each a folder with one job (docs/architecture.md): models, data, parallel,
train, evaluators, inference, perf, cli; configs holds the config schema and recipes.
The public API of the original vit_jax stays: vit_jax.models.get_model / MODEL_CONFIGS,
vit_jax.checkpoint.load / save / load_pretrained and `python -m vit_jax.main`.
Modules that moved in 0.2 are listed in CHANGELOG.md.
"""

__version__ = '0.3.0'
