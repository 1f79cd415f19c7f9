r"""What a ViT's layers do, as numbers: Park et al. (ICLR 2023) "What do self-supervised
vision transformers learn?", section 2-3.

  mean_attention_distance  pixels between a query patch and what it attends to, per
                           layer and head (vit_jax.inference.figures, the ViT paper's
                           Fig. 7 right). Contrastive / self-distillation methods:
                           large in late layers (global); masked modelling: small (local).
  attention_nmi            normalised mutual information between queries and keys of
                           the attention maps, per layer and head: with queries uniform,
                           p(k) = mean_q A[q, k], NMI = I(Q; K) / sqrt(H(Q) H(K)). Near 0
                           when every query attends alike ("attention collapse", CL).
  fourier_log_amplitude    the 2-D Fourier log-amplitude of each layer's patch-token
                           feature map, averaged over channels and images, along the
                           diagonal from the DC component (0) to the highest frequency
                           (pi), relative to the DC component. High values at pi:
                           high-frequency (texture) features, as masked modelling makes.
Attention maps and tokens include the model's prefix tokens (class token, registers);
every analysis drops them and uses the patch tokens only.
"""
import numpy as np

from vit_jax.inference import figures


def _patch_attention(weights: np.ndarray, prefix: int) -> np.ndarray:
  """Attention [..., P, P] among patch tokens, rows renormalised (prefix keys dropped)."""
  att = np.asarray(weights, np.float64)[..., prefix:, prefix:]
  return att / np.maximum(att.sum(axis=-1, keepdims=True), 1e-12)


def mean_attention_distance(weights: np.ndarray, prefix: int, grid: tuple[int, int],
                            stride: int) -> np.ndarray:
  """Mean attention distance in pixels [layers, heads] of [layers, N, heads, T, T] weights."""
  att = _patch_attention(weights, prefix)
  # The figures' distance drops `has_token` leading tokens; here they are already gone.
  return figures.mean_attention_distance(att, False, grid, stride)


def attention_nmi(weights: np.ndarray, prefix: int) -> np.ndarray:
  """Normalised query-key mutual information [layers, heads], averaged over images."""
  att = _patch_attention(weights, prefix)            # [L, N, H, Q, K]
  queries = att.shape[-2]
  p_k = att.mean(axis=-2)                            # p(k) with uniform p(q)
  # x log x -> 0 at x = 0, so absent links contribute nothing.
  ratio = np.where(att > 0, att / np.maximum(p_k[..., None, :], 1e-300), 1.0)
  mutual = (att * np.log(ratio)).sum(axis=(-2, -1)) / queries
  h_q = np.log(queries)
  h_k = -(np.where(p_k > 0, p_k * np.log(np.maximum(p_k, 1e-300)), 0.0)).sum(axis=-1)
  denom = np.sqrt(h_q * h_k)
  nmi = np.where(denom > 0, mutual / np.maximum(denom, 1e-300), 0.0)
  return nmi.mean(axis=1).astype(np.float32)


def fourier_log_amplitude(tokens: np.ndarray, prefix: int,
                          grid: tuple[int, int]) -> np.ndarray:
  """Relative log amplitude [layers, F] at diagonal frequencies 0..pi (F = side // 2 + 1).

  `tokens` [layers, N, T, D] are each layer's output tokens; the patch tokens are
  laid out on the (square) grid and transformed over the two spatial axes.
  """
  tokens = np.asarray(tokens, np.float64)[:, :, prefix:]
  layers, n, patches, dim = tokens.shape
  rows, cols = grid
  if rows != cols or rows * cols != patches:
    raise ValueError(f'fourier_log_amplitude: {patches} patch tokens do not fill a '
                     f'square {rows}x{cols} grid.')
  maps = tokens.reshape(layers, n, rows, cols, dim)
  spectrum = np.abs(np.fft.fft2(maps, axes=(2, 3)))
  log_amp = np.log(spectrum + 1e-6).mean(axis=(1, 4))   # [L, rows, cols]
  # Unshifted, diagonal index i is frequency (i, i) / side: 0 is DC, side // 2 is pi.
  steps = np.arange(rows // 2 + 1)
  diagonal = log_amp[:, steps, steps]
  return (diagonal - diagonal[:, :1]).astype(np.float32)


def frequencies(side: int) -> np.ndarray:
  """The frequencies (in units of pi) of fourier_log_amplitude's columns."""
  return (np.arange(side // 2 + 1) * 2.0 / side).astype(np.float32)
