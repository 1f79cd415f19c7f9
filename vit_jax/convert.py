"""`python -m vit_jax.convert`: see vit_jax.cli.convert."""
from vit_jax.cli import convert

if __name__ == '__main__':
  convert.run()
