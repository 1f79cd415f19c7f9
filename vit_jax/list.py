"""`python -m vit_jax.list`: presets, shipped configs and datasets (vit_jax.cli.listing)."""
from vit_jax.cli import listing

if __name__ == '__main__':
  listing.run()
