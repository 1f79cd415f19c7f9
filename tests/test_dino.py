"""DINO: the loss, the teacher and centre in the extra slot, schedules, views, resume, FSDP."""
import math
import os
import shutil

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from tests import test_train
from vit_jax import checkpoint
from vit_jax import configs
from vit_jax import models
from vit_jax.configs import base
from vit_jax.data import multicrop
from vit_jax.data import pipeline
from vit_jax.data import view_counts
from vit_jax.models import dino as dino_model
from vit_jax.models import from_config
from vit_jax.parallel import sharding
from vit_jax.train import dino
from vit_jax.train import loop
from vit_jax.train import objectives
from vit_jax.train import optimizers
from vit_jax.train import schedules
from vit_jax.train import step as train_step

K = 16


def reference_loss(student, teacher, center, student_temp, teacher_temp):
  """The official double loop in numpy: every (teacher view, other student view) pair."""
  def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
  total, terms = 0.0, 0
  for g in range(teacher.shape[0]):
    q = softmax((teacher[g] - center) / teacher_temp)
    for v in range(student.shape[0]):
      if v != g:
        total += float(np.mean(np.sum(-q * np.log(softmax(student[v] / student_temp)), -1)))
        terms += 1
  return total / terms


def dino_config(**overrides):
  """tiny_config's ViT on 28 px digits: 2 global views, 2 local views of 14 px."""
  c = test_train.tiny_config(objective='dino', total_steps=4, checkpoint_every=2,
                             weight_decay=0.04, weight_decay_end=0.4, grad_clip_norm=3.0,
                             grad_clip_mode='per_tensor', warmup_steps=1)
  c.model.dropout_rate = 0.0
  c.evals.test.every = -1
  c.pp.multicrop.global_pp = ('dino_global1', 'dino_global2')
  c.pp.multicrop.local_crops = 2
  c.pp.multicrop.local_crop = 14
  c.objectives.dino.update(out_dim=K, hidden_dim=32, bottleneck_dim=8,
                           momentum_teacher=0.9, freeze_last_layer_steps=1)
  c.update(overrides)
  return c


def tiny_objective(total_steps=10, **options):
  model = models.get_model('testing', num_classes=3, patches={'size': (4, 4)},
                           hidden_size=16, mlp_dim=32, dropout_rate=0.0)
  return dino.make(model, total_steps=total_steps, out_dim=K, hidden_dim=32,
                   bottleneck_dim=8, **options)


def tiny_batch(n=8, seed=0):
  rng = np.random.RandomState(seed)
  return {'image': jnp.asarray(rng.uniform(-1, 1, (n, 2, 16, 16, 3)), jnp.float32),
          'local': jnp.asarray(rng.uniform(-1, 1, (n, 3, 8, 8, 3)), jnp.float32)}


class LossTest(absltest.TestCase):

  def test_hand_computed_value_and_same_view_pairs_skipped(self):
    # One teacher view q = (1/2, 1/2); student view 1 has p = (1/4, 3/4) at tau_s = 0.1.
    teacher = jnp.zeros((1, 1, 2))
    student = jnp.array([[[5.0, -5.0]], [[0.0, 0.1 * math.log(3)]]])
    loss, mean = dino.dino_loss(student, teacher, jnp.zeros(2), 0.1, 0.04)
    self.assertAlmostEqual(float(loss), 0.5 * (math.log(4) + math.log(4 / 3)), places=5)
    # Student view 0 is the teacher's own view: it does not enter the loss.
    other, _ = dino.dino_loss(student.at[0].set(jnp.array([[-3.0, 7.0]])), teacher,
                              jnp.zeros(2), 0.1, 0.04)
    self.assertAlmostEqual(float(loss), float(other), places=6)
    np.testing.assert_array_equal(mean, [0.0, 0.0])
    # Against the official double loop: 2 global + 3 local views, a centre.
    rng = np.random.RandomState(0)
    s, t, c = rng.randn(5, 4, 7), rng.randn(2, 4, 7), rng.randn(7) * 0.1
    got, mean = dino.dino_loss(jnp.asarray(s), jnp.asarray(t), jnp.asarray(c), 0.1, 0.07)
    self.assertAlmostEqual(float(got), reference_loss(s, t, c, 0.1, 0.07), places=4)
    np.testing.assert_allclose(mean, t.reshape(-1, 7).mean(0), rtol=1e-5)
    # The collapse metrics: outputs equal for every image (after centring) are uniform,
    # ln K per image; one-hot outputs on distinct prototypes have entropy 0 per image and
    # ln(images) for the batch mean; one prototype for every image gives 0 and 0.
    same = dino.collapse_metrics(jnp.ones((2, 4, 8)), jnp.ones(8), 0.04)
    np.testing.assert_allclose([same['teacher_entropy'], same['teacher_batch_entropy']],
                               [math.log(8), math.log(8)], rtol=1e-5)
    distinct = dino.collapse_metrics(10.0 * jnp.eye(8)[None, :4], jnp.zeros(8), 0.04)
    np.testing.assert_allclose([distinct['teacher_entropy'],
                                distinct['teacher_batch_entropy']], [0.0, math.log(4)],
                               atol=1e-4)
    one = dino.collapse_metrics(jnp.tile(10.0 * jnp.eye(8)[:1], (2, 4, 1)), jnp.zeros(8),
                                0.04)
    np.testing.assert_allclose([one['teacher_entropy'], one['teacher_batch_entropy']],
                               [0.0, 0.0], atol=1e-4)

  def test_schedules_clipping_and_flops(self):
    m = dino.momentum_schedule(0.996, 100)
    np.testing.assert_allclose([m(0), m(50), m(100)], [0.996, 0.998, 1.0], rtol=1e-6)
    tau = dino.teacher_temperature(0.04, 0.07, 30)
    np.testing.assert_allclose([tau(0), tau(15), tau(30), tau(90)],
                               [0.04, 0.055, 0.07, 0.07], rtol=1e-6)
    c = base.get_base_config()
    c.update(weight_decay=0.04, weight_decay_end=0.4, total_steps=100)
    wd = optimizers.weight_decay_schedule(c)
    np.testing.assert_allclose([wd(0), wd(50), wd(100)], [0.04, 0.22, 0.4], rtol=1e-6)
    c.weight_decay_end = -1.0
    self.assertEqual(optimizers.weight_decay_schedule(c), 0.04)
    # The decay applies to kernels only (not biases, norms, embeddings).
    params = {'a': {'kernel': jnp.ones(2), 'bias': jnp.ones(2)},
              'LayerNorm_0': {'scale': jnp.ones(2)}}
    self.assertEqual(optimizers.decay_mask(params),
                     {'a': {'kernel': True, 'bias': False}, 'LayerNorm_0': {'scale': False}})
    # Per-tensor clipping scales only the tensors over the norm, each on its own.
    clip = optimizers.clip_per_tensor(3.0)
    out, _ = clip.update({'big': jnp.array([6.0, 8.0]), 'small': jnp.array([0.6, 0.8])},
                         clip.init(None))
    np.testing.assert_allclose(out['big'], [1.8, 2.4], rtol=1e-5)
    np.testing.assert_allclose(out['small'], [0.6, 0.8])
    # FLOPs: the student's 3x on every view plus the teacher's forward on the globals.
    objective = tiny_objective()
    g, l = objective.net.flops_per_view(16), objective.net.flops_per_view(8)
    self.assertGreater(g, l)
    self.assertEqual(objectives.train_flops_per_image(objective, 16, (2, 3, 8)),
                     3 * (2 * g + 3 * l) + 2 * g)


class StepTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.objective = tiny_objective()
    c = base.get_base_config()
    c.update(optimizer='adam', base_lr=1e-3, warmup_steps=0, total_steps=10,
             decay_type='constant', weight_decay=0.04, weight_decay_end=0.4)
    cls.config = c
    cls.tx = optimizers.make(c, schedules.make(c))
    cls.batch = tiny_batch()

  def _init(self):
    return train_step.init_state(self.objective, self.tx, jax.random.PRNGKey(0),
                                 (1, 16, 16, 3))

  def test_teacher_is_the_ema_and_gets_no_gradient_or_optimizer_state(self):
    state = self._init()
    own = state.extra[objectives.STATE_KEY]
    self.assertEqual(set(own), {dino.TEACHER, dino.CENTER})
    # No optimizer state for the teacher: the same as a state without it.
    self.assertEqual(jax.tree.structure(state.opt_state),
                     jax.tree.structure(self.tx.init(state.params)))
    # The loss sends no gradient to the teacher.
    grads = jax.jit(jax.grad(lambda t: self.objective.stateful_loss(
        state.params, {**own, dino.TEACHER: t}, self.batch, jax.random.PRNGKey(1),
        jnp.int32(5))[0]))(own[dino.TEACHER])
    self.assertTrue(all(float(jnp.abs(g).max()) == 0 for g in jax.tree.leaves(grads)))
    step = jax.jit(train_step.make_train_step(self.objective, self.tx))
    history, teacher_outputs = [state.params], []
    project = jax.jit(self.objective.net.project)
    for _ in range(3):
      teacher_outputs.append(project(state.extra[objectives.STATE_KEY][dino.TEACHER],
                                     dino.views_first(self.batch['image'])))
      state, metrics = step(state, self.batch)
      history.append(state.params)
    self.assertIn('teacher_temp', metrics)
    m = dino.momentum_schedule(0.996, 10)
    want, center = history[0], jnp.zeros(K)
    for k, params in enumerate(history[1:]):
      want = jax.tree.map(lambda t, s, k=k: m(k) * t + (1 - m(k)) * s, want, params)
      center = 0.9 * center + 0.1 * teacher_outputs[k].mean(0)
    got = state.extra[objectives.STATE_KEY]
    for a, b in zip(jax.tree.leaves(got[dino.TEACHER]), jax.tree.leaves(want)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got[dino.CENTER], center, rtol=1e-4, atol=1e-6)
    self.assertGreater(float(jnp.abs(got[dino.CENTER]).max()), 0.0)
    # The run's result is the teacher's backbone.
    self.assertIs(objectives.result_params(self.objective, state.params, state.extra),
                  got[dino.TEACHER]['model'])

  def test_frozen_last_layer_gets_no_gradient(self):
    objective = tiny_objective(freeze_last_layer_steps=2)
    state = self._init()
    own = state.extra[objectives.STATE_KEY]
    grad = jax.jit(jax.grad(lambda p, s: objective.stateful_loss(
        p, own, self.batch, jax.random.PRNGKey(1), s)[0]))
    for step, frozen in ((1, True), (2, False)):
      grads = grad(state.params, jnp.int32(step))
      last = grads[dino_model.HEAD][f'{dino_model.LAST_LAYER}_kernel']
      self.assertEqual(float(jnp.abs(last).max()) == 0, frozen)

  def test_gradient_accumulation_gives_the_same_state(self):
    # Micro-batches average the teacher outputs' means: the centre of the whole batch.
    out = []
    for accum in (1, 2):
      state = self._init()
      state, _ = jax.jit(train_step.make_train_step(self.objective, self.tx, accum))(
          state, self.batch)
      out.append(state.extra[objectives.STATE_KEY])
    for a, b in zip(jax.tree.leaves(out[0]), jax.tree.leaves(out[1])):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

  def test_one_vs_four_devices_and_fsdp_on_two(self):
    # The centre averages the teacher outputs over the global batch, whatever its split.
    results = {}
    for name, mesh_shape, rules in (('one', {'data': 1, 'fsdp': 1}, 'replicate'),
                                    ('four', {'data': 4, 'fsdp': 1}, 'replicate'),
                                    ('fsdp', {'data': 1, 'fsdp': 2}, 'fsdp')):
      config = self.config.copy_and_resolve_references()
      config.update(sharding=rules, fsdp_min_size=1)
      n = mesh_shape['data'] * mesh_shape['fsdp']
      mesh = sharding.make_mesh(mesh_shape, jax.devices()[:n])
      init = lambda r: train_step.init_state(  # noqa: E731
          self.objective, self.tx, r, (1, 16, 16, 3))
      shardings = sharding.tree_shardings(jax.eval_shape(init, jax.random.PRNGKey(0)),
                                          mesh, config)
      if name == 'fsdp':
        spec = lambda t: [s.spec for s in jax.tree.leaves(  # noqa: E731
            t, is_leaf=lambda x: isinstance(x, jax.sharding.NamedSharding))]
        teacher = shardings.extra[objectives.STATE_KEY][dino.TEACHER]
        self.assertEqual(spec(teacher), spec(shardings.params))
        self.assertIn(jax.sharding.PartitionSpec(None, 'fsdp'), spec(teacher))
      state = jax.jit(init, out_shardings=shardings)(jax.random.PRNGKey(0))
      step = train_step.jit_train_step(train_step.make_train_step(self.objective, self.tx),
                                       mesh, shardings, donate=False)
      for i in range(2):
        state, _ = step(state, tiny_batch(seed=i))
      results[name] = jax.device_get(state.extra[objectives.STATE_KEY])
    for name in ('four', 'fsdp'):
      for a, b in zip(jax.tree.leaves(results['one']), jax.tree.leaves(results[name])):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


class ViewsTest(absltest.TestCase):

  def test_view_counts_sizes_and_seeding(self):
    config = dino_config(batch=8, data_shards=2)
    config.pp.multicrop.local_crops = 3
    first = next(pipeline.train_dataset(config, [0, 1]).as_numpy_iterator())
    self.assertEqual(first['image'].shape, (8, 2, 28, 28, 3))
    self.assertEqual(first['local'].shape, (8, 3, 14, 14, 3))
    self.assertEqual(first['image'].dtype, np.uint8)
    self.assertFalse(np.array_equal(first['image'][:, 0], first['image'][:, 1]))
    self.assertFalse(np.array_equal(first['local'][:, 0], first['local'][:, 1]))
    # A function of (seed, step, example): the same again, and from step 1 on resume.
    again = pipeline.train_dataset(config, [0, 1]).as_numpy_iterator()
    np.testing.assert_array_equal(next(again)['local'], first['local'])
    second = next(again)
    resumed = next(pipeline.train_dataset(config, [0, 1], start_step=1).as_numpy_iterator())
    for key in ('image', 'local'):
      np.testing.assert_array_equal(resumed[key], second[key])
    model_in = pipeline.finalize(first, 4)
    self.assertEqual(model_in['local'].dtype, np.float32)
    self.assertLessEqual(float(np.abs(model_in['local']).max()), 1.0)

  def test_bad_input_is_one_line_and_creates_nothing(self):
    mixer = dino_config(model_name='Mixer-B_16')
    mixer.model = base.get_base_config().model
    mixer.model.update(patches={'size': (7, 7)}, hidden_dim=16, num_blocks=1,
                       tokens_mlp_dim=8, channels_mlp_dim=16)
    cases = (
        (dino_config(), 'pp.multicrop.global_pp', (), 'at least one global crop'),
        (dino_config(), 'pp.multicrop.local_crop', 32,
         'local_crop=32 is larger than the global crop config.pp.crop=28'),
        (dino_config(), 'objectives.dino.teacher_temp', 0.0,
         'teacher_temp=0.0 must be a number > 0'),
        (dino_config(), 'objectives.dino.student_temp', -0.1,
         'student_temp=-0.1 must be a number > 0'),
        (dino_config(), 'objectives.dino.momentum_teacher', 1.5,
         r'momentum_teacher=1.5 must lie in \[0, 1\]'),
        (dino_config(), 'objectives.dino.center_momentum', -0.5,
         r'center_momentum=-0.5 must lie in \[0, 1\]'),
        (mixer, None, None, 'needs a model with patch tokens and a position embedding'),
    )
    for config, key, value, message in cases:
      if key:
        section, _, leaf = key.rpartition('.')
        config = config.copy_and_resolve_references()
        target = config
        for part in section.split('.'):
          target = target[part]
        target[leaf] = value
      workdir = os.path.join(self.create_tempdir().full_path, 'run')
      with self.subTest(key=key):
        with self.assertRaisesRegex(ValueError, message) as e:
          loop.train_and_evaluate(config, workdir, devices=jax.devices()[:1])
        self.assertNotIn('\n', str(e.exception))
        self.assertFalse(os.path.exists(workdir))


class RecipeTest(absltest.TestCase):

  def test_official_vit_s16_recipe_by_shapes_only(self):
    c = configs.load(os.path.join(test_train.REPO, 'configs',
                                  'pretrain_dino.py:s16,imagenet2012'))
    self.assertEqual((c.model_name, c.objective, c.batch), ('ViT-S_16', 'dino', 1024))
    self.assertAlmostEqual(c.base_lr, 5e-4 * 1024 / 256)
    self.assertEqual((c.end_lr, c.weight_decay, c.weight_decay_end), (1e-6, 0.04, 0.4))
    self.assertEqual((c.grad_clip_norm, c.grad_clip_mode), (3.0, 'per_tensor'))
    total = 100 * 1_281_167 // 1024  # 100 epochs of ImageNet
    self.assertEqual((c.total_steps, c.warmup_steps), (total, total // 10))
    self.assertEqual(c.objectives.dino.freeze_last_layer_steps, total // 100)
    self.assertEqual((c.objectives.dino.out_dim, c.objectives.dino.teacher_temp,
                      c.objectives.dino.momentum_teacher), (65536, 0.04, 0.996))
    self.assertEqual(view_counts.counts(c.pp), (2, 8, 96))
    multicrop.check(c.pp)
    tx = optimizers.make(c, schedules.make(c))
    objective = objectives.make(c, from_config.build(c, 1000))
    objective.check_views(c.pp.crop, view_counts.counts(c.pp))
    state = jax.eval_shape(lambda r: train_step.init_state(
        objective, tx, r, (1, 224, 224, 3)), jax.random.PRNGKey(0))
    teacher = state.extra[objectives.STATE_KEY][dino.TEACHER]
    self.assertEqual(teacher['head']['last_layer_kernel'].shape, (256, 65536))
    batch = {'image': jax.ShapeDtypeStruct((2, 2, 224, 224, 3), jnp.float32),
             'local': jax.ShapeDtypeStruct((2, 8, 96, 96, 3), jnp.float32)}
    new_state, metrics = jax.eval_shape(train_step.make_train_step(objective, tx), state,
                                        batch)
    self.assertEqual(jax.tree.structure(new_state), jax.tree.structure(state))
    self.assertEqual(metrics['train_loss'].shape, ())
    g, l = objective.net.flops_per_view(224), objective.net.flops_per_view(96)
    self.assertEqual(objectives.train_flops_per_image(objective, 224, (2, 8, 96)),
                     3 * (2 * g + 8 * l) + 2 * g)
    self.assertAlmostEqual(g / 1e9, 9.2, delta=0.5)  # ViT-S/16 forward ~4.6 GMACs + head

  def test_cpu_demo_is_the_measured_recipe(self):
    # The README's DINO rows were measured with exactly these knobs (configs/quickstart_ssl.py).
    c = configs.load(os.path.join(test_train.REPO, 'configs', 'quickstart_ssl.py:dino'))
    self.assertEqual((c.objective, c.batch, c.total_steps, c.base_lr), ('dino', 64, 2000, 1e-3))
    self.assertEqual(view_counts.counts(c.pp), (2, 0, 96))
    self.assertEqual(set(c.pp.multicrop.global_pp), {
        'inception_crop(28, 0.3, 1.0)|color_jitter(0.4, 0.4, 0.2, 0.1, 0.8)'})
    d = c.objectives.dino
    self.assertEqual((d.out_dim, d.teacher_temp, d.warmup_teacher_temp, d.momentum_teacher,
                      d.center_momentum, d.norm_last_layer), (256, 0.02, 0.02, 0.99, 0.5, False))
    multicrop.check(c.pp)
    objectives.make(c, from_config.build(c, 10)).check_views(c.pp.crop,
                                                            view_counts.counts(c.pp))


class TrainerTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.workdir = os.path.join(absltest.get_default_test_tmpdir(), 'dino_reference')
    shutil.rmtree(cls.workdir, ignore_errors=True)
    cls.config = dino_config()
    cls.final = loop.train_and_evaluate(cls.config, cls.workdir, devices=jax.devices()[:1])

  def test_exports_teacher_backbone_and_heads(self):
    params = checkpoint.load(os.path.join(self.workdir, 'params.npz'))
    self.assertIn('Transformer', params)
    self.assertEqual(params['Transformer']['posembed_input']['pos_embedding'].shape,
                     (1, 17, 16))
    heads = checkpoint.load(os.path.join(self.workdir, 'dino_params.npz'))
    self.assertEqual(set(heads), {'teacher', 'student'})
    self.assertEqual(heads['teacher']['last_layer_kernel'].shape, (8, K))
    saved = ocp.StandardCheckpointer().restore(
        os.path.join(self.workdir, 'checkpoints', '4', 'default'))
    teacher = saved['extra'][objectives.STATE_KEY][dino.TEACHER]
    test_train.assert_trees_equal(self, params, teacher['model'])
    self.assertFalse(all(np.array_equal(a, b) for a, b in zip(
        jax.tree.leaves(teacher['model']), jax.tree.leaves(saved['params']['model']))))

  def test_resume_is_exact(self):
    # Cut the run back to its step-2 checkpoint and finish it again: the student, the
    # teacher, the centre and the optimizer state come out bit-identical.
    workdir = self.create_tempdir().full_path
    shutil.copytree(self.workdir, workdir, dirs_exist_ok=True)
    shutil.rmtree(os.path.join(workdir, 'checkpoints', '4'))
    for name in ('params.npz', 'dino_params.npz'):
      os.remove(os.path.join(workdir, name))
    loop.train_and_evaluate(self.config, workdir, devices=jax.devices()[:1])
    a, b = (ocp.StandardCheckpointer().restore(os.path.join(d, 'checkpoints', '4', 'default'))
            for d in (workdir, self.workdir))
    test_train.assert_trees_equal(self, a, b)
    self.assertIn(dino.CENTER, a['extra'][objectives.STATE_KEY])
    for name in ('params.npz', 'dino_params.npz'):
      test_train.assert_trees_equal(
          self, checkpoint.load(os.path.join(workdir, name)),
          checkpoint.load(os.path.join(self.workdir, name)))


if __name__ == '__main__':
  absltest.main()
