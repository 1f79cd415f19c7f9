"""`python -m vit_jax.list`; its usage (--help) is vit_jax/list.py's docstring."""
from typing import Sequence

from absl import app

from vit_jax import errors
from vit_jax import models
from vit_jax.configs import experiments
from vit_jax.configs import recipes
from vit_jax.data import catalog

SECTIONS = ('models', 'configs', 'datasets')


def model_lines() -> list[str]:
  """One line per preset: name, short name, family, width x depth, heads, patch."""
  short = {preset: name for name, preset in recipes.MODEL_SHORT_NAMES.items()}
  lines = ['models (--config.model_name=NAME; [short name] for configs/vit.py):']
  for name in sorted(models.MODEL_CONFIGS):
    config = models.MODEL_CONFIGS[name]
    family = 'hybrid' if config.get('resnet') else models.family_of(name).name
    patch = 'x'.join(map(str, config.patches.size)) if 'patches' in config else '-'
    layers = config.get('transformer', {}).get('num_layers', config.get('num_blocks'))
    heads = config.get('transformer', {}).get('num_heads')
    width = config.get('hidden_size', config.get('hidden_dim'))
    shape = f'width {width}, {layers} layers' + (
        f', {heads} heads' if heads else '')
    tag = f' [{short[name]}]' if name in short else ''
    lines.append(f'  {name + tag:28s} {family:7s} {shape}, patch {patch}')
  return lines


def config_lines() -> list[str]:
  """One line per shipped experiment config with the first line of its docstring."""
  lines = ['configs (python -m vit_jax.main --config=NAME[:ARGS] --workdir=DIR):']
  lines += [f'  {name:24s} {experiments.summary(name)}' for name in experiments.names()]
  return lines


def dataset_lines() -> list[str]:
  """One line per named dataset: classes, split sizes, where its data comes from."""
  lines = ['datasets (--config.dataset=NAME):']
  for name in sorted(catalog.DATASETS):
    spec = catalog.DATASETS[name]
    sizes = (f'{spec.num_eval:,} eval (evaluation only: config.evals.<name>.dataset)'
             if not spec.train_split else f'{spec.num_train:,} train / {spec.num_eval:,} eval'
             if spec.num_train is not None else 'sizes known once prepared')
    origin = ('embedded, no download' if spec.local else
              f'manual files: {", ".join(spec.manual_files)}' if spec.manual_files else
              'TFDS download')
    lines.append(f'  {name:28s} {spec.num_classes:>6,} classes, {sizes}; {origin}')
  lines += ['  synthetic[/<config>]         random images (synthetic/64px_5cls_200train_40test)',
            '  folder:<ROOT>                your images: ROOT/CLASS/*.jpg or '
            'ROOT/{train,test}/CLASS/*.jpg',
            '  tfds:<name>                  any TFDS image classification dataset']
  return lines


def main(argv: Sequence[str]) -> None:
  """Prints the sections named on the command line (default: all)."""
  wanted = argv[1:] or list(SECTIONS)
  unknown = [w for w in wanted if w not in SECTIONS]
  if unknown:
    raise app.UsageError(f'Unknown section {unknown[0]!r}; name any of '
                         f'{", ".join(SECTIONS)}')
  makers = {'models': model_lines, 'configs': config_lines, 'datasets': dataset_lines}
  print('\n\n'.join('\n'.join(makers[w]()) for w in wanted))


def run() -> None:
  """Console entry point of `python -m vit_jax.list`."""
  errors.run_command('vit_jax.list', lambda: None, main)
