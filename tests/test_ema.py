"""Weight EMA in the train state's extra slot: formula, no gradient, sharding, resume, export."""
import os
import shutil

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from tests import test_train
from vit_jax import checkpoint
from vit_jax import models
from vit_jax import rundir
from vit_jax.configs import base
from vit_jax.inference import curves
from vit_jax.parallel import sharding
from vit_jax.train import checkpointer
from vit_jax.train import ema
from vit_jax.train import loop
from vit_jax.train import objectives
from vit_jax.train import optimizers
from vit_jax.train import schedules
from vit_jax.train import step as train_step
from vit_jax.train import validate

DECAY = 0.75


def _config(**overrides):
  c = base.get_base_config()
  c.update(dict(optimizer='adam', base_lr=0.01, warmup_steps=0, total_steps=10,
                decay_type='constant', weight_decay=0.1, ema_decay=DECAY))
  c.update(overrides)
  return c


class StepTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    model = models.get_model('testing', num_classes=3, patches={'size': (4, 4)},
                             dropout_rate=0.0)
    self.objective = objectives.Supervised(model, 'softmax_xent')
    rng = np.random.RandomState(0)
    self.batch = {'image': jnp.asarray(rng.uniform(-1, 1, (8, 16, 16, 3)), jnp.float32),
                  'label': jnp.asarray(np.eye(3, dtype=np.float32)[rng.randint(0, 3, 8)])}

  def _run(self, config, steps):
    tx = optimizers.make(config, schedules.make(config))
    state = train_step.init_state(self.objective, tx, jax.random.PRNGKey(0),
                                  (1, 16, 16, 3), lambda p: ema.init_extra(config, p))
    step = jax.jit(train_step.make_train_step(self.objective, tx, 1, None,
                                              ema.make_update(config)))
    history = [jax.device_get(state.params)]
    for _ in range(steps):
      state, _ = step(state, self.batch)
      history.append(jax.device_get(state.params))
    return state, history

  def test_the_ema_is_the_formula_after_k_steps(self):
    state, history = self._run(_config(), 5)
    want = history[0]
    for params in history[1:]:
      want = jax.tree.map(lambda e, p: DECAY * e + (1 - DECAY) * p, want, params)
    got = ema.params_of(state.extra)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # It trails the parameters rather than equalling them.
    moved = [float(jnp.abs(a - b).max()) for a, b in
             zip(jax.tree.leaves(got), jax.tree.leaves(history[-1]))]
    self.assertGreater(max(moved), 0.0)

  def test_no_gradient_no_optimizer_state_and_the_same_training(self):
    with_ema, _ = self._run(_config(), 3)
    without, _ = self._run(_config(ema_decay=0.0), 3)
    self.assertEqual(without.extra, {})
    # The optimizer state has the same leaves: the EMA gets no moments, no decay.
    self.assertEqual(jax.tree.structure(with_ema.opt_state),
                     jax.tree.structure(without.opt_state))
    for a, b in zip(jax.tree.leaves(with_ema.params), jax.tree.leaves(without.params)):
      np.testing.assert_array_equal(a, b)

  def test_fsdp_shards_the_ema_like_the_parameters(self):
    config = _config(sharding='fsdp', fsdp_min_size=1)
    mesh = sharding.make_mesh({'data': 1, 'fsdp': 2}, jax.devices()[:2])
    tx = optimizers.make(config, schedules.make(config))
    abstract = jax.eval_shape(lambda r: train_step.init_state(
        self.objective, tx, r, (1, 16, 16, 3), lambda p: ema.init_extra(config, p)),
                              jax.random.PRNGKey(0))
    shardings = sharding.tree_shardings(abstract, mesh, config)
    specs = lambda tree: [s.spec for s in jax.tree.leaves(  # noqa: E731
        tree, is_leaf=lambda x: isinstance(x, jax.sharding.NamedSharding))]
    self.assertEqual(specs(shardings.extra['ema']), specs(shardings.params))
    self.assertIn(jax.sharding.PartitionSpec(None, 'fsdp'), specs(shardings.params))

  def test_bad_decay_is_one_line(self):
    mesh = sharding.make_mesh({'data': 1, 'fsdp': 1}, jax.devices()[:1])
    for decay in (1.0, -0.1, 1.5):
      with self.assertRaisesRegex(ValueError, rf'config.ema_decay={decay} must lie in '
                                  r'\[0, 1\)'):
        validate.validate(test_train.tiny_config(ema_decay=decay), mesh)


class TrainerTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.workdir = os.path.join(absltest.get_default_test_tmpdir(), 'ema_reference')
    shutil.rmtree(cls.workdir, ignore_errors=True)
    cls.config = test_train.tiny_config(ema_decay=0.5)
    cls.config.evals.test.every = 4
    cls.final = loop.train_and_evaluate(cls.config, cls.workdir, devices=jax.devices()[:1])

  def test_scored_and_exported(self):
    self.assertIn('accuracy_test_ema', self.final)
    records = curves.read_metrics(self.workdir)
    self.assertEqual([r['step'] for r in records if 'loss_test_ema' in r], [4, 8])
    params = checkpoint.load(os.path.join(self.workdir, 'params.npz'))
    averaged = checkpoint.load(os.path.join(self.workdir, rundir.EMA_PARAMS_FILE))
    self.assertEqual(jax.tree.structure(params), jax.tree.structure(averaged))
    self.assertFalse(all(np.array_equal(a, b) for a, b in
                         zip(jax.tree.leaves(params), jax.tree.leaves(averaged))))

  def test_resume_is_exact(self):
    # Cut the run back to its step-4 checkpoint and finish it again.
    workdir = self.create_tempdir().full_path
    shutil.copytree(self.workdir, workdir, dirs_exist_ok=True)
    shutil.rmtree(os.path.join(workdir, 'checkpoints', '8'))
    for name in ('params.npz', rundir.EMA_PARAMS_FILE):
      os.remove(os.path.join(workdir, name))
    loop.train_and_evaluate(self.config, workdir, devices=jax.devices()[:1])
    for name in ('params.npz', rundir.EMA_PARAMS_FILE):
      test_train.assert_trees_equal(
          self, checkpoint.load(os.path.join(workdir, name)),
          checkpoint.load(os.path.join(self.workdir, name)))

  def test_a_checkpoint_from_before_the_slot_resumes(self):
    # Written as the train state was before it had `extra`: restores with an empty slot.
    workdir = self.create_tempdir().full_path
    ckpt = checkpointer.StateCheckpointer(workdir, keep=1, async_save=False)
    config = test_train.tiny_config()
    tx = optimizers.make(config, schedules.make(config))
    objective = objectives.Supervised(models.get_model('testing', num_classes=10,
                                                       patches={'size': (7, 7)},
                                                       hidden_size=16, mlp_dim=32),
                                    'softmax_xent')
    state = train_step.init_state(objective, tx, jax.random.PRNGKey(0), (1, 28, 28, 3))
    old = {'step': state.step, 'params': state.params, 'opt_state': state.opt_state,
           'rng': state.rng}
    ckpt._manager.save(3, args=ocp.args.StandardSave(old))  # pylint: disable=protected-access
    ckpt.close()
    reader = checkpointer.StateCheckpointer(workdir, keep=1, async_save=False,
                                            verify=False)
    restored, step = reader.restore_latest(jax.eval_shape(lambda: state))
    reader.close()
    self.assertEqual((step, restored.extra), (3, {}))
    test_train.assert_trees_equal(self, restored.params, state.params)


if __name__ == '__main__':
  absltest.main()
