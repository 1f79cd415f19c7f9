"""Labelled figures of the layer analyses (vit_jax.inference.analyses) of one or more models.

Each function takes {label: numbers} (one entry per checkpoint) and returns uint8 pixels
[H, W, 3] of a matplotlib figure with a title, labelled axes, a legend and a caption.
"""
from collections.abc import Mapping, Sequence

from matplotlib import cm
import numpy as np

from vit_jax.inference import figures

_COLOURS = ('tab:blue', 'tab:orange', 'tab:green', 'tab:red')
_MARKERS = ('o', 's', '^', 'D')


def _style(i: int) -> dict:
  return {'color': _COLOURS[i % len(_COLOURS)], 'marker': _MARKERS[i % len(_MARKERS)]}


def _depth_axis(ax, layers: int) -> None:
  ax.set_xlabel('Depth (transformer block)')
  ax.set_xlim(0.5, layers + 0.5)
  ax.set_xticks(range(1, layers + 1))


def _finish(fig, caption: str) -> np.ndarray:
  fig.text(0.5, 0.01, caption, ha='center', va='bottom', fontsize=7, wrap=True,
           color='0.25')
  fig.tight_layout(rect=(0, 0.07, 1, 1))
  return figures.figure_pixels(fig)


def per_head_plot(values: Mapping[str, np.ndarray], title: str, ylabel: str,
                  caption: str, ylim: Sequence[float] = ()) -> np.ndarray:
  """Per model: a dot per head and a line through the heads' mean, against depth."""
  fig = figures.new_figure(5, 4.4)
  ax = fig.add_subplot(1, 1, 1)
  layers = 1
  for i, (label, v) in enumerate(values.items()):
    v = np.asarray(v, np.float64)          # [layers, heads]
    layers = max(layers, len(v))
    depth = np.arange(1, len(v) + 1)
    style = _style(i)
    for h in range(v.shape[1]):
      ax.scatter(depth + 0.08 * (i - 0.5), v[:, h], s=10, alpha=0.35,
                 color=style['color'])
    ax.plot(depth, v.mean(axis=1), label=f'{label} (mean of heads)', **style)
  _depth_axis(ax, layers)
  ax.set_ylabel(ylabel)
  if ylim:
    ax.set_ylim(*ylim)
  ax.set_title(title, fontsize=10)
  ax.legend(fontsize=7)
  return _finish(fig, caption)


def fourier_plot(curves: Mapping[str, np.ndarray], freqs: np.ndarray) -> np.ndarray:
  """Per model a panel of Δ log amplitude against frequency (a curve per layer), and
  the high-frequency value against depth for every model."""
  count = len(curves)
  fig = figures.new_figure(4 * (count + 1), 4.2)
  axes = fig.subplots(1, count + 1, squeeze=False)[0]
  for ax, (label, c) in zip(axes, curves.items()):
    c = np.asarray(c)
    for layer, row in enumerate(c):
      ax.plot(freqs, row, color=cm.viridis(layer / max(len(c) - 1, 1)),
              label=f'block {layer + 1}' if len(c) <= 12 else None)
    ax.set_xlabel('Frequency (x pi)')
    ax.set_ylabel('Δ log amplitude (vs DC)')
    ax.set_title(label, fontsize=9)
    if len(c) <= 12:
      ax.legend(fontsize=6)
  ax = axes[-1]
  layers = 1
  for i, (label, c) in enumerate(curves.items()):
    c = np.asarray(c)
    layers = max(layers, len(c))
    ax.plot(np.arange(1, len(c) + 1), c[:, -1], label=label, **_style(i))
  _depth_axis(ax, layers)
  ax.set_ylabel('Δ log amplitude at pi')
  ax.set_title('High-frequency amplitude by depth', fontsize=9)
  ax.legend(fontsize=7)
  fig.suptitle('Fourier analysis of the feature maps (Park et al. 2023, Fig. 6)',
               fontsize=10)
  return _finish(fig, 'Log amplitude of the 2-D Fourier transform of the patch-token '
                 'maps, channels and images averaged, minus its DC value; higher at pi: '
                 'more high-frequency (texture) content.')


def accuracy_plot(accuracies: Mapping[str, Mapping[str, Sequence[float]]],
                  chance: float) -> np.ndarray:
  """Per probe (k-NN, linear) a panel of accuracy against depth, a line per model."""
  probes = sorted({p for acc in accuracies.values() for p in acc})
  fig = figures.new_figure(4.5 * max(len(probes), 1), 4.2)
  axes = fig.subplots(1, max(len(probes), 1), squeeze=False)[0]
  for ax, probe in zip(axes, probes):
    layers = 1
    for i, (label, acc) in enumerate(accuracies.items()):
      if probe in acc:
        values = np.asarray(acc[probe])
        layers = max(layers, len(values))
        ax.plot(np.arange(1, len(values) + 1), values, label=label, **_style(i))
    ax.axhline(chance, color='0.6', linestyle='--', linewidth=1, label='chance')
    _depth_axis(ax, layers)
    ax.set_ylabel('Top-1 accuracy')
    ax.set_ylim(0, 1)
    ax.set_title(f'{probe} accuracy of each block\'s features', fontsize=9)
    ax.legend(fontsize=7)
  return _finish(fig, 'Each block\'s output pooled (class token, or mean of the patch '
                 'tokens), probed on the frozen features: train split as memory / '
                 'training set, test split scored.')
