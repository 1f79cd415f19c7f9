"""FP8 with delayed scaling (matmul='fp8_delayed'): amax histories in the train state."""
import contextlib
import io

from absl.testing import absltest
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from vit_jax import checkpoint
from vit_jax import models
from vit_jax.inference import load
from vit_jax.models import fp8
from vit_jax.perf import benchmark
from vit_jax.train import checkpointer
from vit_jax.train import ema
from vit_jax.train import objectives
from vit_jax.train import step as train_step

DENSE = (((1,), (0,)), ((), ()))
E4M3_MAX, E5M2_MAX = 448.0, 57344.0
IMAGE = (1, 16, 16, 3)


def _history(x_seen, w_seen, g_seen):
  """A [3, AMAX_HISTORY] history whose rows' maxima are the given values (older columns)."""
  h = np.zeros((3, fp8.AMAX_HISTORY), np.float32)
  h[:, 3] = [x_seen, w_seen, g_seen]
  h[:, 1] = [x_seen / 2, w_seen / 4, g_seen / 8]
  return jnp.asarray(h)


def _assert_trees_equal(test, a, b):
  test.assertEqual(jax.tree.structure(a), jax.tree.structure(b))
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


class DelayedMatmulTest(absltest.TestCase):

  def test_scales_come_from_the_history_and_the_step_records_its_maxima(self):
    # Scales 0.5 (x), 1 (w), 2 (grad): every value below is exact in float8.
    history = _history(0.5 * E4M3_MAX, E4M3_MAX, 2 * E5M2_MAX)
    x = jnp.asarray([[1.0, -2.0], [0.5, 3.0]], jnp.float32)
    w = jnp.asarray([[1.0, 0.25], [-1.0, 2.0]], jnp.float32)
    g = jnp.asarray([[4.0, -8.0], [2.0, 1.0]], jnp.float32)
    out, vjp = jax.vjp(lambda a, b, h: fp8.delayed_dot_general(a, b, DENSE, history=h),
                       x, w, history)
    np.testing.assert_array_equal(out, x @ w)
    dx, dw, recorded = vjp(g)
    np.testing.assert_array_equal(dx, g @ w.T)
    np.testing.assert_array_equal(dw, x.T @ g)
    expected = np.zeros((3, fp8.AMAX_HISTORY), np.float32)
    expected[:, 0] = [3.0, 2.0, 8.0]  # max|x|, max|w|, max|grad| of this step
    np.testing.assert_array_equal(recorded, expected)
    advanced = np.asarray(fp8.advance(history, recorded))
    np.testing.assert_array_equal(advanced[:, 0], [3.0, 2.0, 8.0])
    np.testing.assert_array_equal(advanced[:, 1:], np.asarray(history)[:, :-1])

  def test_rounding_waits_for_no_reduction_over_the_operands(self):
    # Current scaling reduces each operand before rounding it; delayed scaling reduces
    # only the [3, L] history (the step's maxima are taken beside, for the gradient).
    x, w = jnp.ones((64, 32), jnp.bfloat16), jnp.ones((32, 16), jnp.bfloat16)
    history = _history(1.0, 1.0, 1.0)

    def reduced_shapes(fn):
      found, todo = set(), [jax.make_jaxpr(fn)(x, w).jaxpr]
      while todo:
        for e in todo.pop().eqns:
          if e.primitive.name == 'reduce_max':
            found.add(tuple(e.invars[0].aval.shape))
          for v in e.params.values():  # nested jaxprs: pjit, custom_vjp_call
            v = getattr(v, 'jaxpr', v)
            if hasattr(v, 'eqns'):
              todo.append(v)
      return found

    self.assertEqual(
        reduced_shapes(lambda a, b: fp8.delayed_dot_general(a, b, DENSE, history=history)),
        {(3, fp8.AMAX_HISTORY)})
    self.assertEqual(reduced_shapes(lambda a, b: fp8.fp8_dot_general(a, b, DENSE)),
                     {(64, 32), (32, 16)})

  def test_values_past_the_history_saturate_and_the_old_scale_is_kept(self):
    # The scale does not follow the operand: 4 with scale 1/448 saturates at 448 * (1/448).
    history = _history(1.0, 1.0, 1.0)
    x = jnp.asarray([[4.0, 0.5]], jnp.float32)
    w = jnp.asarray([[1.0], [1.0]], jnp.float32)
    out = fp8.delayed_dot_general(x, w, DENSE, history=history)
    np.testing.assert_allclose(np.asarray(out), [[1.5]], rtol=1e-6)
    self.assertTrue(np.isfinite(np.asarray(out)).all())

  def test_an_empty_history_scales_by_one(self):
    for seen in (0.0, np.inf):
      self.assertEqual(float(fp8.scale_for(jnp.float32(seen), fp8.FORWARD)), 1.0)
    scales = fp8.history_scales(jnp.zeros((3, fp8.AMAX_HISTORY)))
    self.assertEqual([float(s) for s in scales], [1.0, 1.0, 1.0])

  def test_split_and_merge_are_inverse(self):
    model = models.get_model('testing', num_classes=3, patches={'size': (4, 4)},
                             matmul='fp8_delayed', fused_qkv=False)
    tree = model.init(jax.random.PRNGKey(0), jnp.zeros(IMAGE))['params']
    params, histories = fp8.split_histories(tree)
    names = {jax.tree_util.keystr(p) for p, _ in
             jax.tree_util.tree_leaves_with_path(histories)}
    self.assertIn("['Transformer']['encoderblock_0']['MultiHeadDotProductAttention_0']"
                  "['fp8_history_query']", names)
    self.assertIn("['Transformer']['encoderblock_0']['MlpBlock_0']['fp8_history_Dense_1']",
                  names)
    plain = models.get_model('testing', num_classes=3, patches={'size': (4, 4)})
    self.assertEqual(jax.tree.structure(params), jax.tree.structure(
        plain.init(jax.random.PRNGKey(0), jnp.zeros(IMAGE))['params']))
    _assert_trees_equal(self, fp8.merge_histories(params, histories), tree)

  def test_a_trained_models_parameters_load_without_histories(self):
    # params.npz of an fp8_delayed run holds no histories; its config names the option.
    plain = models.get_model('testing', num_classes=3, patches={'size': (4, 4)})
    params = plain.init(jax.random.PRNGKey(0), jnp.zeros(IMAGE))['params']
    path = self.create_tempdir().full_path + '/params.npz'
    checkpoint.save(params, path)
    loaded = load.load_model('testing', path, patches={'size': (4, 4)},
                             matmul='fp8_delayed')
    self.assertEqual(loaded.model.matmul, 'fp8_delayed')
    fresh = load.reinitialized(loaded, 1)
    self.assertEqual(jax.tree.structure(fresh.params), jax.tree.structure(params))


class TrainStateTest(absltest.TestCase):
  """One short run per matmul (shared), each step's state kept; variants compile their own."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    rng = np.random.RandomState(0)
    cls.batch = {'image': jnp.asarray(rng.uniform(-1, 1, (8, 16, 16, 3)), jnp.float32),
                 'label': jnp.asarray(np.eye(3, dtype=np.float32)[rng.randint(0, 3, 8)])}
    cls.tx = optax.adamw(1e-2, weight_decay=0.1)
    cls.steps = {}
    cls.runs = {m: cls._train(cls._step(m), cls._init(m), 12)
                for m in ('default', 'fp8_delayed')}

  @classmethod
  def _objective(cls, matmul, **kw):
    return objectives.Supervised(models.get_model(
        'testing', num_classes=3, patches={'size': (4, 4)}, dropout_rate=0.0,
        dtype='bfloat16', matmul=matmul, **kw), 'softmax_xent')

  @classmethod
  def _init(cls, matmul, init_extra=None, **kw):
    return train_step.init_state(cls._objective(matmul, **kw), cls.tx,
                                 jax.random.PRNGKey(0), IMAGE, init_extra)

  @classmethod
  def _step(cls, matmul, accum=1, update=None, **kw):
    key = (matmul, accum, update is not None, tuple(sorted(kw.items())))
    if key not in cls.steps:
      cls.steps[key] = jax.jit(train_step.make_train_step(
          cls._objective(matmul, **kw), cls.tx, accum, None, update))
    return cls.steps[key]

  @classmethod
  def _train(cls, step, state, steps):
    """(the state after each step, the losses)."""
    states, losses = [], []
    for _ in range(steps):
      state, metrics = step(state, cls.batch)
      states.append(state)
      losses.append(float(metrics['train_loss']))
    return states, losses

  def test_histories_live_in_extra_not_in_params_or_optimizer_state(self):
    state, plain = self.runs['fp8_delayed'][0][-1], self.runs['default'][0][-1]
    self.assertEqual(jax.tree.structure(state.params), jax.tree.structure(plain.params))
    self.assertEqual(jax.tree.structure(state.opt_state),
                     jax.tree.structure(plain.opt_state))
    self.assertEqual(set(state.extra), {train_step.FP8_KEY})
    self.assertNotIn(train_step.FP8_KEY, plain.extra)

  def test_first_step_from_empty_histories_is_finite_and_records(self):
    state, loss = self.runs['fp8_delayed'][0][0], self.runs['fp8_delayed'][1][0]
    self.assertTrue(np.isfinite(loss))
    self.assertTrue(all(np.isfinite(x).all() for x in jax.tree.leaves(state.params)))
    for h in jax.tree.leaves(state.extra[train_step.FP8_KEY]):
      h = np.asarray(h)
      self.assertTrue((h[:2, 0] > 0).all())  # x and w were seen
      self.assertGreaterEqual(h[2, 0], 0.0)  # the gradient: 0 behind the zero-init head
      self.assertEqual(np.abs(h[:, 1:]).max(), 0.0)

  def test_training_tracks_bf16(self):
    base = self.runs['default'][1]
    states, delayed = self.runs['fp8_delayed']
    self.assertTrue(np.isfinite(delayed).all())
    self.assertLess(delayed[-1], 0.6 * delayed[0])  # it learns the batch
    np.testing.assert_allclose(delayed, base, rtol=0.15, atol=0.05)
    filled = [np.asarray(h)[:, :11] for h in
              jax.tree.leaves(states[-1].extra[train_step.FP8_KEY])]
    self.assertTrue(all((h > 0).all() for h in filled))  # a column per step after the first

  def test_micro_batches_record_the_largest_maxima(self):
    # x and w maxima do not depend on how the batch is split; gradients scale with it.
    whole = self.runs['fp8_delayed'][0][0]
    (halves,), _ = self._train(self._step('fp8_delayed', accum=2), self._init('fp8_delayed'), 1)
    for a, b in zip(jax.tree.leaves(whole.extra[train_step.FP8_KEY]),
                    jax.tree.leaves(halves.extra[train_step.FP8_KEY])):
      np.testing.assert_allclose(np.asarray(b)[:2, 0], np.asarray(a)[:2, 0], rtol=1e-6)

  def test_checkpoint_resume_is_bit_exact(self):
    states = self.runs['fp8_delayed'][0]
    workdir = self.create_tempdir().full_path
    ckpt = checkpointer.StateCheckpointer(workdir, keep=1, async_save=False)
    ckpt.save(3, states[2])
    ckpt.close()
    reader = checkpointer.StateCheckpointer(workdir, keep=1, async_save=False)
    restored, step = reader.restore_latest(jax.eval_shape(lambda: states[2]))
    reader.close()
    self.assertEqual(step, 3)
    _assert_trees_equal(self, restored.extra, states[2].extra)
    resumed, _ = self._train(self._step('fp8_delayed'), restored, 2)
    _assert_trees_equal(self, resumed[-1], states[4])

  def test_ema_averages_params_only_and_evaluation_needs_no_history(self):
    config = ml_collections.ConfigDict({'ema_decay': 0.5})
    init = self._init('fp8_delayed', lambda p: ema.init_extra(config, p))
    states, _ = self._train(self._step('fp8_delayed', update=ema.make_update(config)),
                            init, 2)
    state = states[-1]
    self.assertEqual(jax.tree.structure(ema.params_of(state.extra)),
                     jax.tree.structure(state.params))
    _assert_trees_equal(self, state.extra[train_step.FP8_KEY],
                        self.runs['fp8_delayed'][0][1].extra[train_step.FP8_KEY])
    # Evaluation applies the params alone: the same float8 matmuls as current scaling.
    model = self._objective('fp8_delayed').model
    images = self.batch['image']
    got = model.apply({'params': state.params}, images)
    want = model.clone(matmul='fp8').apply({'params': state.params}, images)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    # With the histories (inference as the benchmark runs it) the kept scales apply.
    merged = fp8.merge_histories(state.params, state.extra[train_step.FP8_KEY])
    kept = np.asarray(model.apply({'params': merged}, images), np.float32)
    want = np.asarray(want, np.float32)
    np.testing.assert_allclose(kept, want, atol=0.25 * np.abs(want).max())
    self.assertGreater(np.abs(kept - want).max(), 0.0)

  def test_scanned_blocks_record_what_the_loop_records(self):
    # Under scan_layers the histories stack with the blocks' parameters at compute time.
    (scanned,), _ = self._train(self._step('fp8_delayed', scan_layers=True),
                                self._init('fp8_delayed', scan_layers=True), 1)
    looped = self.runs['fp8_delayed'][0][0]
    for a, b in zip(jax.tree.leaves(looped.extra[train_step.FP8_KEY]),
                    jax.tree.leaves(scanned.extra[train_step.FP8_KEY])):
      # bf16 maxima of differently fused programs: within a few bf16 ulps.
      np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=0.05)


class BenchmarkTest(absltest.TestCase):

  def test_train_and_infer_carry_the_histories(self):
    # The benchmark's step is the trainer's (histories in extra); inference reads them.
    tiny = ['--model=testing', '--batch=8', '--resolution=16', '--steps=1', '--warmup=1',
            '--repeats=1', '--dtype=bfloat16', '--num_classes=3', '--matmul=fp8_delayed',
            '--peak=1', '--devices=1']
    with contextlib.redirect_stdout(io.StringIO()):
      results = [benchmark.main(tiny + [f'--mode={mode}']) for mode in ('train', 'infer')]
    for res in results:
      self.assertEqual(res['matmul'], 'fp8_delayed')
      self.assertGreater(res['img_s'], 0)


if __name__ == '__main__':
  absltest.main()
