"""Config keys of the original vision_transformer repository, and what they are here.

Users of the original pass its keys on the command line (`--config.eval_every=100`).
A key with the same meaning under today's name is accepted as an alias; one without
is refused in one line naming the key to use instead.
"""
import re

# Same meaning, another name: accepted.
ALIASES = {
    'progress_every': 'log_every',
    'grad_norm_clip': 'grad_clip_norm',
    'tfds_data_dir': 'data_dir',
    'tfds_manual_dir': 'manual_dir',
}
# No key of the same meaning (evaluations are per evaluator here; the accumulator dtype
# is per optimizer): refused, naming what to use.
REPLACED = {
    'eval_every': 'evals.test.every (the test split; evals.minival.every for the '
                  'held-out minival)',
    'optim_dtype': 'optimizers.sgd.accumulator_dtype (SGD momentum; '
                   'optimizers.adam.mu_dtype for Adam)',
}
_FLAG = re.compile(r'^(--?config\.)([A-Za-z_]\w*)(=.*)?$', re.DOTALL)


def translate(argv: list[str]) -> list[str]:
  """argv with the original's aliased --config.KEY renamed; ValueError for replaced keys."""
  out = []
  for arg in argv:
    match = _FLAG.match(arg)
    key = match.group(2) if match else None
    if key in REPLACED:
      raise ValueError(f"config key {key!r} is the original vision_transformer's; use "
                       f'--config.{REPLACED[key]}.')
    if key in ALIASES:
      arg = f'{match.group(1)}{ALIASES[key]}{match.group(3) or ""}'
    out.append(arg)
  return out
