"""`python -m vit_jax.train`: the train command (python -m vit_jax.main), as timm users type it."""
import runpy

if __name__ == '__main__':
  runpy.run_module('vit_jax.main', run_name='__main__', alter_sys=True)
