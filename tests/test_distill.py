"""Knowledge distillation (vit_jax.train.distill): each mode's loss by hand, the frozen
teacher at its own resolution, FLOPs, the train state without the teacher, exact resume,
the DeiT recipe's values and the one-line mistakes."""
import os
import shutil
import sys

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from tests import commands
from tests import tiny_trained
from tests.tiny_train_config import tiny_config
from vit_jax import checkpoint
from vit_jax import configs
from vit_jax import rundir
from vit_jax.models import flops
from vit_jax.models import from_config
from vit_jax.train import distill
from vit_jax.train import loop
from vit_jax.train import objectives
from vit_jax.train import optimizers
from vit_jax.train import schedules

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLASSES = 10


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _xent(logits, labels):  # labels: one-hot (or soft) rows
  return -(labels * _log_softmax(logits)).sum(-1)


def _kl(student, teacher, tau):  # KL(softmax(t / tau) || softmax(s / tau)) per row
  log_q, log_p = _log_softmax(teacher / tau), _log_softmax(student / tau)
  return (np.exp(log_q) * (log_q - log_p)).sum(-1)


def _student_config(teacher: str, **options):
  c = tiny_config()
  c.objective = 'distill'
  c.objectives.distill.teacher = teacher
  c.objectives.distill.update(options)
  if c.objectives.distill.mode in ('hard', 'soft'):
    c.model.distilled = True
  return c


class LossTest(parameterized.TestCase):
  """Each mode against its formula written out in numpy."""

  def setUp(self):
    super().setUp()
    rng = np.random.default_rng(0)
    self.cls, self.dist, self.teacher = (rng.normal(size=(6, 5)) * 3 for _ in range(3))
    self.labels = np.eye(5)[rng.integers(0, 5, 6)] * 0.9 + 0.02  # smoothed one-hot

  def _loss(self, mode, student, alpha=0.5, tau=2.0):
    loss, metrics = distill.distill_loss(mode, student, jnp.asarray(self.teacher),
                                         jnp.asarray(self.labels), alpha, tau)
    return float(loss), {k: float(v) for k, v in metrics.items()}

  def test_hard_is_deit_hard(self):
    loss, metrics = self._loss('hard', (self.cls, self.dist), alpha=0.5)
    pseudo = np.eye(5)[self.teacher.argmax(-1)]
    expected = 0.5 * _xent(self.cls, self.labels).mean() + 0.5 * _xent(
        self.dist, pseudo).mean()
    self.assertAlmostEqual(loss, expected, places=5)
    agree = ((self.cls + self.dist).argmax(-1) == self.teacher.argmax(-1)).mean()
    self.assertAlmostEqual(metrics['teacher_agreement'], agree)

  def test_soft_is_deit_soft_with_its_numel_normalisation(self):
    loss, metrics = self._loss('soft', (self.cls, self.dist), alpha=0.3, tau=2.0)
    # losses.py: kl_div(reduction='sum') * T * T / outputs_kd.numel().
    kd = _kl(self.dist, self.teacher, 2.0).sum() * 4.0 / self.dist.size
    self.assertAlmostEqual(metrics['distill_loss'], kd, places=5)
    self.assertAlmostEqual(loss, 0.7 * _xent(self.cls, self.labels).mean() + 0.3 * kd,
                           places=5)

  def test_logits_is_hinton(self):
    loss, _ = self._loss('logits', self.cls, alpha=0.25, tau=3.0)
    expected = (0.75 * _xent(self.cls, self.labels).mean() +
                0.25 * 9.0 * _kl(self.cls, self.teacher, 3.0).mean())
    self.assertAlmostEqual(loss, expected, places=5)

  def test_patient_is_big_vision_kl_and_reads_no_labels(self):
    loss, _ = distill.distill_loss('patient', jnp.asarray(self.cls),
                                   jnp.asarray(self.teacher), None, 0.5, 2.0)
    # big_vision dist(kind='kl', t): t**2 * softmax_xent(student / t, softmax(teacher / t), kl=True)
    self.assertAlmostEqual(float(loss), 4.0 * _kl(self.cls, self.teacher, 2.0).mean(),
                           places=5)

  def test_kl_is_zero_on_equal_logits(self):
    self.assertAlmostEqual(
        float(jnp.max(jnp.abs(distill.kl_per_example(self.cls, self.cls, 1.5)))), 0.0,
        places=6)


class ObjectiveTest(parameterized.TestCase):
  """A real teacher (the session's tiny trained model) and a student around it."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    root = os.path.join(absltest.get_default_test_tmpdir(), 'distill')
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    # The session's shared tiny model (width 64, 2 blocks), a workdir with config.json.
    cls.teacher_dir = os.path.dirname(tiny_trained.trained()[0])
    cls.root = root

  def _objective(self, **options):
    config = _student_config(self.teacher_dir, **options)
    return config, objectives.make(config, from_config.build(config, CLASSES))

  def test_teacher_is_read_from_its_workdir_at_its_own_resolution(self):
    _, objective = self._objective(mode='logits', teacher_resolution=56)
    teacher = objective.teacher
    self.assertEqual((teacher.resolution, teacher.num_classes), (56, CLASSES))
    self.assertEqual(teacher.model.hidden_size, 64)
    images = jax.random.uniform(jax.random.PRNGKey(1), (3, 28, 28, 3), minval=-1, maxval=1)
    by_hand = teacher.model.apply({'params': teacher.params},
                                  jax.image.resize(images, (3, 56, 56, 3), 'bilinear'),
                                  train=False)
    np.testing.assert_allclose(teacher.logits(images), by_hand, rtol=1e-5, atol=1e-6)

  @parameterized.parameters('hard', 'soft')
  def test_deit_modes_train_the_two_heads_apart(self, mode):
    config, objective = self._objective(mode=mode, alpha=0.4, tau=2.0)
    params = objective.init(jax.random.PRNGKey(0), (1, 28, 28, 3))
    params = jax.tree.map(lambda p: p + 0.05 * jax.random.normal(jax.random.PRNGKey(2),
                                                                 p.shape), params)
    images = jax.random.uniform(jax.random.PRNGKey(1), (4, 28, 28, 3), minval=-1, maxval=1)
    labels = jax.nn.one_hot(jnp.arange(4), CLASSES)
    rng = jax.random.PRNGKey(3)
    cls, dist = objective._student(params, images, rng)  # pylint: disable=protected-access
    self.assertFalse(np.allclose(cls, dist))
    # The heads found are the model's: their mean is its (DeiT's evaluation) output.
    output = objective.model.apply({'params': params}, images, train=True,
                                   rngs={'dropout': rng})
    np.testing.assert_allclose((cls + dist) / 2, output, rtol=1e-5, atol=1e-6)
    teacher = np.asarray(objective.teacher.logits(images), np.float64)
    cls, dist, labels = (np.asarray(x, np.float64) for x in (cls, dist, labels))
    if mode == 'hard':
      term = _xent(dist, np.eye(CLASSES)[teacher.argmax(-1)]).mean()
    else:
      term = 4.0 * _kl(dist, teacher, 2.0).mean() / CLASSES
    loss, metrics = objective.loss(params, {'image': images, 'label': labels}, rng)
    self.assertAlmostEqual(float(metrics['distill_loss']), term, places=4)
    self.assertAlmostEqual(float(loss), 0.6 * _xent(cls, labels).mean() + 0.4 * term,
                           places=4)
    self.assertEqual(config.model.distilled, True)

  def test_flops_count_the_teacher_forward(self):
    _, objective = self._objective(mode='logits', teacher_resolution=56)
    student = flops.model_flops_per_image(objective.model, 28, train=False)
    teacher = flops.model_flops_per_image(objective.teacher.model, 56, train=False)
    self.assertGreater(teacher, student)
    self.assertAlmostEqual(objectives.train_flops_per_image(objective, 28),
                           3 * student + teacher)

  def test_train_state_holds_the_student_alone(self):
    config, objective = self._objective(mode='hard')
    tx = optimizers.make(config, schedules.make(config))
    state = jax.eval_shape(loop.state_init(config, objective, tx), jax.random.PRNGKey(0))
    student = jax.eval_shape(objective.model.init, jax.random.PRNGKey(0),
                             jnp.zeros((1, 28, 28, 3)))['params']
    self.assertEqual(jax.tree.structure(state.params), jax.tree.structure(student))
    self.assertEqual(state.extra, {})
    # The optimizer's state is the student's: the teacher's leaves are in no tree.
    self.assertEqual(jax.tree.structure(state.opt_state),
                     jax.tree.structure(jax.eval_shape(tx.init, student)))

  def test_run_resumes_exactly_and_exports_the_student(self):
    config = _student_config(self.teacher_dir, mode='hard')
    reference = os.path.join(self.root, 'student')
    final = loop.train_and_evaluate(config, reference, devices=jax.devices()[:1])
    self.assertIn('accuracy_test', final)
    records = [r for r in loop.writers.read_metrics(reference) if 'train_loss' in r]
    self.assertIn('teacher_agreement', records[-1])
    self.assertIn('distill_loss', records[-1])
    params = checkpoint.load(os.path.join(reference, rundir.PARAMS_FILE))
    self.assertIn('head_dist', params)  # the student, with its distillation head
    # Cut the run back to its step-4 checkpoint and finish it again.
    workdir = self.create_tempdir().full_path
    shutil.copytree(reference, workdir, dirs_exist_ok=True)
    shutil.rmtree(os.path.join(workdir, rundir.CHECKPOINT_DIR, '8'))
    os.remove(os.path.join(workdir, rundir.PARAMS_FILE))
    loop.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
    resumed = checkpoint.load(os.path.join(workdir, rundir.PARAMS_FILE))
    for a, b in zip(jax.tree.leaves(resumed), jax.tree.leaves(params)):
      np.testing.assert_array_equal(a, b)

  def test_mistakes_are_one_line(self):
    cases = [
        (dict(teacher=os.path.join(self.root, 'nope')), FileNotFoundError,
         r'^config.objectives.distill.teacher: Checkpoint .*nope does not exist'),
        (dict(mode='hrad'), ValueError,
         r"^config.objectives.distill.mode='hrad' is unknown; did you mean hard\?"),
        (dict(teacher=''), ValueError, r'^config.objectives.distill.teacher is not set'),
        (dict(tau=0.0), ValueError, r'^config.objectives.distill.tau=0.0 must be'),
        (dict(alpha=1.5), ValueError, r'^config.objectives.distill.alpha=1.5 must lie'),
    ]
    for options, error, pattern in cases:
      with self.subTest(str(options)):
        config = _student_config(self.teacher_dir)
        config.objectives.distill.update(options)
        with self.assertRaisesRegex(error, pattern):
          objectives.check(config)
    # A student without the distillation token in a DeiT mode; a teacher of 5 classes.
    config = _student_config(self.teacher_dir, mode='hard')
    config.model.distilled = False
    with self.assertRaisesRegex(ValueError, r'set config.model.distilled=True'):
      objectives.make(config, from_config.build(config, CLASSES))
    config = _student_config(self.teacher_dir, mode='logits')
    with self.assertRaisesRegex(ValueError, r'has 10 classes, the student 5: distil'):
      objectives.make(config, from_config.build(config, 5))

  def test_mistakes_stop_the_command_with_exit_2(self):
    teacher = os.path.join(self.root, 'nope')
    result = commands.run([
        sys.executable, '-m', 'vit_jax.main',
        f'--config={os.path.join(REPO, "tests", "tiny_train_config.py")}',
        f'--workdir={os.path.join(self.root, "never")}', '--config.objective=distill',
        f'--config.objectives.distill.teacher={teacher}'],
                          env={**os.environ, 'PYTHONPATH': REPO})
    self.assertEqual(result.returncode, 2, result.stderr)
    self.assertEqual(result.stderr.strip().splitlines(), [
        f'vit_jax: error: config.objectives.distill.teacher: Checkpoint {teacher} does '
        'not exist; check the path.'])
    self.assertFalse(os.path.exists(os.path.join(self.root, 'never')))


def _deit(arg):
  return configs.load(f'{os.path.join(REPO, "configs", "deit.py")}:{arg}')


class RecipeTest(absltest.TestCase):
  """configs/deit.py's distilled recipe: DeiT's values, written out."""

  def test_distilled_deit_recipe(self):
    plain = _deit('s16,imagenet2012')
    c = _deit('s16,imagenet2012,distill=hard')
    self.assertEqual(c.objective, 'distill')
    self.assertEqual(c.model.distilled, True)
    self.assertEqual(dict(c.objectives.distill), {
        'teacher': 'hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k',
        'mode': 'hard', 'alpha': 0.5, 'tau': 1.0, 'teacher_model': '',
        'teacher_resolution': 0})
    # Everything else is DeiT's own recipe.
    for key in ('batch', 'base_lr', 'total_steps', 'warmup_steps', 'weight_decay',
                'pp.train', 'pp.mixup', 'model.stochastic_depth'):
      self.assertEqual(c[key] if '.' not in key else c[key.split('.')[0]][key.split('.')[1]],
                       plain[key] if '.' not in key else
                       plain[key.split('.')[0]][key.split('.')[1]], key)
    soft = _deit('s16,imagenet2012,distill=soft')
    self.assertEqual((soft.objectives.distill.mode, soft.objectives.distill.alpha,
                      soft.objectives.distill.tau), ('soft', 0.5, 1.0))
    # big_vision's bit_i1k.py: KL at t 1 alone, mixup p 1.0, 1200 epochs (of 1,281,167
    # images at DeiT's batch 1024); no token, labels unread.
    patient = _deit('s16,imagenet2012,distill=patient')
    self.assertEqual(
        (patient.objectives.distill.mode, patient.objectives.distill.tau,
         patient.model.distilled, patient.total_steps, patient.pp.mixup, patient.pp.cutmix),
        ('patient', 1.0, False, 1_501_367, 1.0, 0.0))

  def test_unknown_distill_mode_in_the_argument(self):
    with self.assertRaisesRegex(ValueError, r"distill='hrad'.*did you mean hard"):
      _deit('s16,imagenet2012,distill=hrad')


if __name__ == '__main__':
  absltest.main()
