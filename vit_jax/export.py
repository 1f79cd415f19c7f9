"""`python -m vit_jax.export`: see vit_jax.cli.export."""
from vit_jax.cli import export

if __name__ == '__main__':
  export.run()
