"""`python -m vit_jax.predict`: top-5 predictions (vit_jax.cli.predict)."""
from vit_jax.cli import predict

if __name__ == '__main__':
  predict.run()
