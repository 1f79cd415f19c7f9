"""What a newcomer meets first: --help, one-line errors, labelled files, curves, labels."""
import json
import os
import re
import subprocess
import sys
import textwrap

from absl.testing import absltest
from PIL import Image
import yaml

from tests import commands
from tests import tiny_trained
from vit_jax import errors
from vit_jax import rundir
from vit_jax import serving
from vit_jax.cli import common
from vit_jax.evaluators import knn
from vit_jax.evaluators import layer_analysis
from vit_jax.evaluators import linear_probe
from vit_jax.inference import curves
from vit_jax.train import loop
from vit_jax.train import writers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(REPO, 'docs', 'images', 'examples')

# Every flag each command takes, as `--help` must list it.
COMMAND_FLAGS = {
    'vit_jax.main': ('config', 'workdir', 'debug', 'print_config'),
    'vit_jax.predict': ('checkpoint', 'model', 'labels', 'resolution', 'activation',
                        'top', 'data_dir'),
    'vit_jax.visualize': ('checkpoint', 'model', 'out', 'resolution'),
    'vit_jax.fewshot': ('checkpoint', 'model', 'datasets', 'shots', 'seeds',
                        'resolution', 'batch', 'data_dir', 'probes', 'knn_k',
                        'knn_temperature', 'weight_decays', 'linear_protocol',
                        'linear_batch', 'linear_epochs', 'linear_lrs',
                        'linear_min_area', 'linear_augment'),
    'vit_jax.analyze': ('checkpoint', 'model', 'label', 'dataset', 'out', 'images',
                        'pooling', 'probes', 'batch'),
    'vit_jax.convert': ('from', 'to', 'to_format', 'model', 'num_heads', 'drop_head',
                        'activation', 'layer_norm_epsilon'),
    'vit_jax.export': ('checkpoint', 'model', 'format', 'output', 'resolution', 'hub_dir',
                       'push_to_hub', 'hub_private'),
    'vit_jax.evaluate': ('checkpoint', 'model', 'num_heads', 'dataset', 'split',
                         'data_dir', 'resolution', 'batch', 'loss', 'label_key',
                         'real_labels'),
    'vit_jax.vtab': ('checkpoint', 'workdir', 'config', 'tasks', 'protocol', 'worker',
                     'num_workers', 'report_only'),
    'vit_jax.plot': ('out',),
    'vit_jax.list': (),
    'vit_jax.perf.benchmark': ('model', 'batch', 'resolution', 'steps', 'remat',
                               'profile_dir'),
    'vit_jax.perf.memory': ('devices', 'config', 'hidden_size'),
    'vit_jax.perf.data_benchmark': ('dataset', 'batch', 'recipe'),
    'vit_jax.perf.checkpoint_verify': ('dir',),
}
# Defaults cli/common spells out so --help loads no TensorFlow: they must be the evaluators'.
HELP_DEFAULTS = {
    'vit_jax.fewshot': {'knn_k': str(knn.DEFAULT_K),
                        'knn_temperature': str(knn.DEFAULT_TEMPERATURE),
                        'weight_decays': ','.join(
                            str(w) for w in linear_probe.DEFAULT_WEIGHT_DECAYS)},
    'vit_jax.analyze': {'probes': ','.join(layer_analysis.PROBES)},
}
# What each usage text must name besides the flags: positional arguments, the config syntax.
USAGE_NAMES = {
    'vit_jax.main': ('--config.KEY=VALUE', 'quickstart', 'pretrain_mae', '--print_config'),
    'vit_jax.predict': ('IMAGE [IMAGE ...]',),
    'vit_jax.visualize': ('IMAGE [IMAGE ...]',),
    'vit_jax.plot': ('WORKDIR',),
    'vit_jax.list': ('models', 'configs', 'datasets'),
    'vit_jax.convert': ('--num_heads', '.safetensors'),  # the usage itself, no pointer
    'vit_jax.export': ('stablehlo', 'saved_model', 'onnx'),
}
# Runs a command as `python -m NAME --help` does and reports its exit status and whether
# TensorFlow had been imported by the time the help was printed.
_HELP_PROBE = """
import runpy, sys
name = sys.argv[1]
sys.argv = [name, '--help']
try:
  runpy.run_module(name, run_name='__main__', alter_sys=True)
  code = None
except SystemExit as e:
  code = e.code
sys.stdout.flush()
print(f'PROBE exit={code} tensorflow={"tensorflow" in sys.modules}', file=sys.stderr)
"""


def _env():
  return dict(os.environ, PYTHONPATH=REPO)


class HelpTest(absltest.TestCase):

  def test_help_of_every_command_exits_0_before_tensorflow_loads(self):
    # All at once: each start-up is mostly imports, so they overlap well.
    procs = {name: subprocess.Popen(
        [sys.executable, '-c', _HELP_PROBE, name], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=_env(), cwd='/')
             for name in COMMAND_FLAGS}
    for name, proc in procs.items():
      out, err = proc.communicate(timeout=300)
      with self.subTest(name):
        self.assertIn('PROBE exit=0 tensorflow=False', err, f'{name}: {err[-1000:]}')
        self.assertIn('flags:', out, f'{name}: {err[-1000:]}')
        for flag in COMMAND_FLAGS[name]:
          self.assertRegex(out, rf'--(\[no\])?{flag}\b', f'{name} --help lacks --{flag}')
        for flag, default in HELP_DEFAULTS.get(name, {}).items():
          shown = re.search(rf'--{flag}:.*?\(default: \'([^\']*)\'\)', out, re.S)
          self.assertIsNotNone(shown, f'{name} --help shows no default of --{flag}')
          self.assertEqual([float(v) if flag != 'probes' else v
                            for v in shown.group(1).split(',')],
                           [float(v) if flag != 'probes' else v
                            for v in default.split(',')], f'{name} --{flag}')
        for text in USAGE_NAMES.get(name, ()):
          self.assertIn(text, out, f'{name} --help does not name {text}')
        self.assertNotIn('see vit_jax.cli', out)
        self.assertNotIn('--jax_', out, f'{name}: --help is for our flags; '
                         '--helpfull lists the libraries\'')
        # A whole config as a flag's default (perf.memory's --config) is cut to one line.
        self.assertNotIn('eval_split:', out, name)

  def test_export_formats_of_the_help_are_the_serving_formats(self):
    self.assertEqual(common.EXPORT_FORMATS, serving.FORMATS)

  def test_print_config_shows_the_resolved_config_without_training(self):
    workdir = os.path.join(self.create_tempdir().full_path, 'run')
    proc = subprocess.run(
        [sys.executable, '-c', _HELP_PROBE.replace("'--help'", "*sys.argv[2:]"),
         'vit_jax.main', '--config=quickstart', '--config.model.num_layers=2',
         '--config.progress_every=7',
         '--config.data_dir=~/tfds', f'--workdir={workdir}', '--print_config'],
        capture_output=True, text=True, env=_env(), timeout=300, cwd='/')
    self.assertIn('PROBE exit=0 tensorflow=False', proc.stderr, proc.stderr[-2000:])
    printed = yaml.safe_load(proc.stdout.replace('!!python/tuple', ''))
    self.assertEqual(printed['model']['num_layers'], 2)  # the override
    self.assertEqual(printed['model']['hidden_size'], 96)  # the quickstart's own value
    self.assertEqual(printed['log_every'], 7)  # an original key, translated
    self.assertEqual(printed['data_dir'], os.path.expanduser('~/tfds'))
    self.assertFalse(os.path.exists(workdir))


class ExitTest(absltest.TestCase):

  def test_the_final_collection_is_skipped_and_atexit_still_runs(self):
    # A cycle with a finalizer: Python's last collection at exit would reach it.
    script = textwrap.dedent(f"""
        import atexit, sys
        sys.path.insert(0, {REPO!r})
        from vit_jax import errors
        if sys.argv[1] == 'skip':
          errors.skip_final_gc()
        atexit.register(print, 'atexit ran')
        class Cycle:
          def __del__(self):
            print('collected')
        c = Cycle()
        c.me = c
        del c
        import gc
        gc.disable()  # only the collection at exit may find it
        """)
    for mode, collected in (('skip', False), ('keep', True)):
      out = subprocess.run([sys.executable, '-c', script, mode], capture_output=True,
                           text=True, check=True, timeout=120).stdout
      self.assertIn('atexit ran', out, mode)
      self.assertEqual('collected' in out, collected, mode)


class GcsCheckpointTest(absltest.TestCase):

  def test_unreadable_gs_checkpoint_is_one_line_and_writes_nothing(self):
    # A bucket path that exists nowhere: offline it fails on the network, online on
    # the missing object; either way before anything is written.
    workdir = os.path.join(self.create_tempdir().full_path, 'work')
    path = 'gs://vit_models/no-such-dir-vit-jax-test/ViT-Ti_16.npz'
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.main',
         f'--config={os.path.join(REPO, "configs", "quickstart.py")}',
         f'--workdir={workdir}',
         '--config.pretrained_dir=gs://vit_models/no-such-dir-vit-jax-test'],
        env=_env(), timeout=300, cwd='/')
    self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    self.assertLen(lines, 1, proc.stderr[-2000:])
    self.assertIn(f'Cannot read checkpoint {path}', lines[0])
    self.assertIn(f'gsutil cp {path} .', lines[0])
    self.assertIn('https://storage.googleapis.com/vit_models/'
                  'no-such-dir-vit-jax-test/ViT-Ti_16.npz', lines[0])
    self.assertFalse(os.path.exists(workdir))


  def test_checkpoint_is_checked_before_the_dataset_is_prepared(self):
    # The fine-tuning config on a dataset not prepared yet: the unreadable checkpoint
    # is reported at once, before any download is tried or anything is written.
    workdir = os.path.join(self.create_tempdir().full_path, 'work')
    data_dir = self.create_tempdir().full_path
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.main',
         f'--config={os.path.join(REPO, "configs", "vit.py")}:ti16,cifar10',
         f'--workdir={workdir}', f'--config.data_dir={data_dir}',
         '--config.pretrained_dir=gs://vit_models/no-such-dir-vit-jax-test'],
        env=_env(), timeout=300, cwd='/')
    self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
    self.assertLen(proc.stderr.strip().splitlines(), 1, proc.stderr[-2000:])
    self.assertIn('Cannot read checkpoint gs://vit_models/no-such-dir-vit-jax-test/'
                  'ViT-Ti_16.npz', proc.stderr)
    self.assertEqual(os.listdir(data_dir), [])
    self.assertFalse(os.path.exists(workdir))


class TrainedWorkdirTest(absltest.TestCase):
  """The work directory of a real (tiny) training run."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.params_path, _, _ = tiny_trained.trained()
    cls.workdir = os.path.dirname(cls.params_path)

  def test_config_json_is_resolved(self):
    with open(os.path.join(self.workdir, loop.CONFIG_FILE)) as f:
      config = json.load(f)
    self.assertEqual(config['model']['num_classes'], 10)  # -1 in the config file
    self.assertEqual(config['dataset'], 'mnist5k')

  def test_the_run_writes_the_layout_rundir_names_and_one_reader_reads_it(self):
    files = os.listdir(self.workdir)
    for name in (rundir.CONFIG_FILE, rundir.PARAMS_FILE, rundir.METRICS_FILE):
      self.assertIn(name, files)
    self.assertEqual(rundir.objective_params_file('mae'), 'mae_params.npz')
    # One reader of metrics.jsonl, under the names the trainer and the plots had for it.
    self.assertIs(writers.read_metrics, rundir.read_metrics)
    self.assertIs(curves.read_metrics, rundir.read_metrics)
    records = rundir.read_metrics(self.workdir)
    self.assertEqual(records, rundir.read_metrics(
        os.path.join(self.workdir, rundir.METRICS_FILE)))
    self.assertEqual([r['step'] for r in records if 'train_loss' in r], [50, 100, 150, 200])

  def test_predict_names_classes_after_the_runs_dataset(self):
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.predict', f'--checkpoint={self.params_path}',
         '--top=10', os.path.join(EXAMPLES, 'digit_7.png')],
        env=_env(), timeout=300, cwd='/')
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    names = [line.split()[-1] for line in proc.stdout.splitlines()[1:]]
    # mnist5k's label names, read through the config.json beside params.npz.
    self.assertCountEqual(names, [str(i) for i in range(10)])

  def test_plot_writes_the_training_curves(self):
    out = os.path.join(self.create_tempdir().full_path, 'curves.png')
    proc = commands.run(
        [sys.executable, '-m', 'vit_jax.plot', self.workdir, f'--out={out}'],
        env=_env(), timeout=300, cwd='/')
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertEqual(proc.stdout.strip(), out)
    with Image.open(out) as img:
      self.assertEqual((img.format, img.size), ('PNG', (900, 360)))
    records = curves.read_metrics(self.workdir)
    steps, losses = curves.series(records, 'train_loss')
    self.assertEqual(steps.tolist(), [50, 100, 150, 200])
    self.assertLess(losses[-1], losses[0])

  def test_plot_errors_are_one_line(self):
    missing = os.path.join(self.create_tempdir().full_path, 'nowhere')
    proc = commands.run([sys.executable, '-m', 'vit_jax.plot', missing], env=_env(),
                        timeout=300)
    self.assertNotEqual(proc.returncode, 0)
    self.assertLen(proc.stderr.strip().splitlines(), 1, proc.stderr)
    self.assertIn(f'Work directory {missing} does not exist', proc.stderr)
    empty = self.create_tempdir().full_path
    with self.assertRaisesRegex(FileNotFoundError, 'metrics.jsonl does not exist'):
      curves.read_metrics(empty)
    with open(os.path.join(empty, 'metrics.jsonl'), 'w') as f:
      f.write('{"step": 1, "train_loss": 2.0}\nnot json\n')
    with self.assertRaisesRegex(ValueError, 'line 2 is not a metrics record'):
      curves.read_metrics(empty)


class PackagingTest(absltest.TestCase):

  def test_a_plain_install_ships_every_module(self):
    # `pip install .` (not -e) copies only what find_packages finds: a folder of modules
    # without __init__.py would be left out and the commands fail after installing.
    import setuptools  # pylint: disable=g-import-not-at-top
    found = set(setuptools.find_packages(REPO, include=['vit_jax', 'vit_jax.*']))
    folders = {os.path.relpath(root, REPO).replace(os.sep, '.')
               for root, _, files in os.walk(os.path.join(REPO, 'vit_jax'))
               if any(f.endswith('.py') for f in files) and '__pycache__' not in root}
    self.assertEqual(folders - found, set())


class ExampleImagesTest(absltest.TestCase):

  def test_shipped_examples_are_small_images(self):
    for name, size in (('digit_7.png', (28, 28)), ('cat.jpg', (160, 106))):
      path = os.path.join(EXAMPLES, name)
      self.assertLess(os.path.getsize(path), 20_000, name)
      with Image.open(path) as img:
        self.assertEqual(img.size, size)


if __name__ == '__main__':
  absltest.main()
