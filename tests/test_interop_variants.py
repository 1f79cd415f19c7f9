"""Tests for the ViT variants' checkpoints: timm / transformers families in and out, and their refusals.

Checkpoints of families vit_jax cannot hold yet are refused in one line that
names the feature (no "not a ViT" or "inconsistent" guesses), nothing written.
"""
import json
import os

from absl.testing import absltest
import numpy as np
import safetensors.numpy

from tests import test_checkpoint
from vit_jax.models import formats

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, 'tests', 'testdata', 'interop')


class UnsupportedFamilyTest(test_checkpoint.CheckpointTestCase):
  """BEiT and EVA02 files name what vit_jax lacks."""

  def _timm_state(self) -> dict:
    return dict(safetensors.numpy.load_file(
        os.path.join(FIXTURES, 'timm_vit.safetensors')))

  def _save(self, name: str, state: dict) -> str:
    src = os.path.join(self.dir, 'in', name)
    os.makedirs(os.path.dirname(src), exist_ok=True)
    safetensors.numpy.save_file(state, src)
    return src

  def _refused(self, src: str, regex: str, **kwargs) -> None:
    out = self.path('out.npz')
    self.assertOneLineError(ValueError, regex, formats.convert, src, out,
                            num_heads=2, **kwargs)
    self.assertFalse(os.path.exists(out), 'something was written')

  def test_beit_eva02_and_hf_beit_name_the_feature(self):
    state = self._timm_state()
    width = state['pos_embed'].shape[-1]
    # BEiT: no absolute position embedding, q/v biases, a relative bias table per block.
    beit = {k: v for k, v in state.items() if k != 'pos_embed'}
    for i in range(2):
      beit[f'blocks.{i}.attn.relative_position_bias_table'] = np.ones((12, 2), np.float32)
    self._refused(self._save('beit.safetensors', beit), r'relative position bias \(BEiT\)')
    # EVA02: separate q/k/v projections and a SwiGLU MLP with a norm inside.
    eva = dict(state)
    for i in range(2):
      b = f'blocks.{i}.'
      qkv = eva.pop(b + 'attn.qkv.weight')
      eva.pop(b + 'attn.qkv.bias')
      for j, n in enumerate('qkv'):
        eva[f'{b}attn.{n}_proj.weight'] = qkv[j * width:(j + 1) * width]
      fc1 = eva.pop(b + 'mlp.fc1.weight')
      eva[b + 'mlp.fc1_g.weight'] = eva[b + 'mlp.fc1_x.weight'] = fc1
      eva[b + 'mlp.norm.weight'] = np.ones(fc1.shape[0], np.float32)
    self._refused(self._save('eva.safetensors', eva),
                  r'2D rotary position embedding \(RoPE\) and SwiGLU.*EVA02')
    # transformers BEiT.
    hf_dir = os.path.join(self.dir, 'in', 'hf_beit')
    os.makedirs(hf_dir)
    with open(os.path.join(FIXTURES, 'hf_backbone', 'config.json')) as f:
      config = {**json.load(f), 'model_type': 'beit'}
    with open(os.path.join(hf_dir, 'config.json'), 'w') as f:
      json.dump(config, f)
    safetensors.numpy.save_file(
        dict(safetensors.numpy.load_file(
            os.path.join(FIXTURES, 'hf_backbone', 'model.safetensors'))),
        os.path.join(hf_dir, 'model.safetensors'))
    self._refused(hf_dir, r"'beit' model with relative position bias")


if __name__ == '__main__':
  absltest.main()
