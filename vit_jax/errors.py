"""One-line errors: the first line of an exception's message, and commands that report them.

Every command (`python -m vit_jax.<command>`, the perf tools) runs through run_command, so
a user's mistake is one line `prog: error: ...` with exit status 2, never a traceback.
"""
import atexit
import difflib
import gc
import sys
from typing import Callable, Iterable

from absl import app
from absl import flags


def first_line(error: BaseException | str, limit: int | None = 200) -> str:
  """The first line of an error's message, at most `limit` characters (None: all).

  An exception without a message gives its type's name, so the line is never empty.
  """
  lines = str(error).strip().splitlines()
  if not lines:
    return type(error).__name__ if isinstance(error, BaseException) else ''
  return lines[0].strip()[:limit]


def did_you_mean(word: str, candidates: Iterable[str],
                 show: Callable[[str], str] = str) -> str:
  """'did you mean a, b or c?' for the candidates closest to `word` (case ignored), or ''."""
  candidates = list(candidates)
  ratios = [difflib.SequenceMatcher(None, word.lower(), c.lower()).ratio() for c in candidates]
  # The best first; equally close ones in the order given (difflib's own reverses them).
  ranked = sorted((i for i, r in enumerate(ratios) if r >= 0.5), key=lambda i: -ratios[i])
  close = [show(candidates[i]) for i in ranked[:3]]
  if not close:
    return ''
  listed = close[0] if len(close) == 1 else f'{", ".join(close[:-1])} or {close[-1]}'
  return f'did you mean {listed}?'


def list_flags_in_help(fv: flags.FlagValues = flags.FLAGS) -> None:
  """Makes `--help` list every flag the package defined, wherever it was defined.

  absl's --help shows only the key flags of the file named by sys.argv[0] (the thin
  `vit_jax/<command>.py` entry point, which defines none); --helpfull adds the
  libraries' flags too.
  """
  for module, module_flags in fv.flags_by_module_dict().items():
    if module.startswith('vit_jax') or '/vit_jax/' in module:
      for flag in module_flags:
        fv.register_key_flag_for_module(sys.argv[0], flag)


# The exit status of every user error (a bad flag, path or file), as vit_jax.main's.
USER_ERROR = 2

_HELP = ('--help', '-help', '-h', '--helpshort', '-?', '--helpfull', '-helpfull')


def _short_defaults(help_text: str) -> str:
  """absl's help with each default that spans lines (a whole config) cut to one line."""
  out, skipping = [], False
  for line in help_text.splitlines():
    if skipping:
      skipping = not line.rstrip().endswith("')")
      continue
    start = line.find("(default: '")
    if start >= 0 and not line.rstrip().endswith("')"):
      out.append(line[:start] + '(default: a whole config; the description above says '
                 'which)')
      skipping = True
      continue
    out.append(line)
  return '\n'.join(out)


def exit_on_help(argv: list[str], define_flags: Callable[[], None] = lambda: None,
                 extra: str = '') -> None:
  """Prints the command's help to stdout and exits 0 when argv asks for it.

  Called before anything heavy is imported (the entry modules call it before the command's
  module loads TensorFlow), so `--help` answers in about a second. The help is the entry
  module's docstring, `extra` (e.g. the shipped configs) and the package's flags;
  --helpfull adds the libraries' flags. absl's own --help would exit 1.
  """
  asked = [a for a in argv[1:] if a.split('=')[0] in _HELP]
  if not asked:
    return
  define_flags()
  list_flags_in_help()
  full = any('helpfull' in a for a in asked)
  usage = (sys.modules['__main__'].__doc__ or f'python -m {argv[0]} [flags]').strip()
  sys.stdout.write(usage + '\n')
  if extra:
    sys.stdout.write('\n' + extra.strip() + '\n')
  sys.stdout.write('\nflags:\n')
  help_text = flags.FLAGS.get_help() if full else flags.FLAGS.main_module_help()
  sys.stdout.write(_short_defaults(help_text) + '\n')
  if not full:
    sys.stdout.write('\nTry --helpfull to list the libraries\' flags too.\n')
  sys.stdout.flush()
  sys.exit(0)


class _Usage(ValueError):
  """A wrong command line, reported like every other user error."""


def _flag_problem(prog: str, error: flags.Error) -> str:
  """The one line for a missing or malformed flag."""
  problems = '; '.join(str(error).strip().splitlines())
  return f'{prog}: error: {problems}; see {prog} --help.'


def check_early(prog: str, argv: list[str], define_flags: Callable[[], None],
                check: Callable[[flags.FlagValues], None]) -> None:
  """Runs a command's flag checks before its heavy imports: one line and exit 2 on a mistake.

  The entry modules of the commands that load TensorFlow call it first, so a wrong flag or
  path is reported in about two seconds, not after the imports. The flags are parsed, checked
  and reset; run_command parses them again.
  """
  define_flags()
  try:
    flags.FLAGS(list(argv), known_only=True)  # absl's own flags are parsed later
    check(flags.FLAGS)
  except flags.Error as e:
    print(_flag_problem(prog, e), file=sys.stderr)
    sys.exit(USER_ERROR)
  except (ValueError, OSError) as e:
    print(f'{prog}: error: {e}', file=sys.stderr)
    sys.exit(USER_ERROR)
  flags.FLAGS.unparse_flags()


def skip_final_gc() -> None:
  """At exit, freezes the objects so Python's final collection skips them (1.8-2.4 s here).

  The interpreter's last full collection walks the whole TensorFlow/JAX object graph after the
  command's work, files and logs are done; the memory is the process's and goes with it.
  """
  atexit.register(gc.freeze)


def run_command(prog: str, define_flags: Callable[[], None], main_fn: Callable,
                errors: tuple = (ValueError, OSError)) -> None:
  """Runs an absl main with one-line errors (`prog: error: ...`, exit 2) instead of tracebacks."""
  exit_on_help(sys.argv, define_flags)
  skip_final_gc()
  try:
    define_flags()
  except flags.DuplicateFlagError:
    pass  # check_early defined them
  list_flags_in_help()

  def main(argv):
    try:
      return main_fn(argv)
    except app.UsageError as e:
      # absl would print the whole module docstring before the error.
      raise _Usage(f'{e}; see {prog} --help.') from None

  def parse(argv):
    try:
      return flags.FLAGS(argv)
    except flags.Error as e:  # a missing or malformed flag
      print(_flag_problem(prog, e), file=sys.stderr)
      sys.exit(USER_ERROR)

  try:
    app.run(main, flags_parser=parse)
  except (_Usage,) + tuple(errors) as e:
    print(f'{prog}: error: {e}', file=sys.stderr)
    sys.exit(USER_ERROR)
