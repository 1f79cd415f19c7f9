r"""Trains and evaluates a model: --config=CONFIG --workdir=DIR (python -m vit_jax.main, vit-jax train).

  python -m vit_jax.main --config=quickstart --workdir=/tmp/vit_quickstart
  python -m vit_jax.main --config=configs/vit.py:b16,cifar10 --workdir=/tmp/b16 \
      --config.batch=256 --config.total_steps=500
  python -m vit_jax.main --config=quickstart --config.model.num_layers=2 --print_config

--config is a shipped config's name (listed below; `python -m vit_jax.list configs`
adds the presets and datasets) or a config file, with :ARGS passed to its
get_config(ARGS). Every key of the config can be set on the command line as
--config.KEY=VALUE, nested keys with dots (--config.model.num_layers=2,
--config.evals.test.every=100); vit_jax/configs/base.py lists and explains every key.
--print_config prints the resolved config and exits without training. Re-running
the same command resumes from the work directory's newest checkpoint. A mistake is
one line `vit_jax: error: ...` with exit status 2; Ctrl-C saves a checkpoint and
exits 130.
"""
import sys

from vit_jax.cli import train_flags

if __name__ == '__main__':
  train_flags.exit_on_help(sys.argv)
  rest = train_flags.parse_flags(sys.argv)  # a mistake: one line, exit status 2
  train_flags.exit_on_print_config()
  train_flags.exit_on_missing()
  train_flags.retain_host_memory()  # before JAX starts its CPU threads
  # The config checks that need no devices or TensorFlow (a second's imports, not --help's).
  from vit_jax.cli import early  # pylint: disable=g-import-not-at-top
  early.check_training(train_flags.CONFIG.value)
  # Only now: the trainer's modules load TensorFlow, which the above do not need.
  from vit_jax.cli import main  # pylint: disable=g-import-not-at-top
  main.run(rest)
