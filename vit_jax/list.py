r"""What exists: model presets, shipped experiment configs and datasets.

  python -m vit_jax.list             # all three
  python -m vit_jax.list models      # or: configs, datasets

Presets go to --config.model_name (and `--model` of predict, export, ...); configs to
--config=NAME[:ARGS] of vit_jax.main; datasets to --config.dataset.
"""
from vit_jax.cli import listing

if __name__ == '__main__':
  listing.run()
