"""`python -m vit_jax COMMAND [flags]`: every command of the package (vit_jax.cli.commands)."""
from vit_jax.cli import commands

if __name__ == '__main__':
  commands.main()
