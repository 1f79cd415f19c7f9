r"""The ViT paper's pictures of what a model learned, as PNG files or image arrays.

`write_figures` (the `python -m vit_jax.visualize` command) writes into a directory
labelled figures (title, axes, colour bar, a caption saying what a tile is):
  attention_rollout_<image>.png  Fig. 6: each image (at least 224 px), the image weighted
                             by the attention rollout (Abnar & Zuidema, 2020) from the
                             output token to the patches, and the rollout as a heat map;
                             one file per image, named after it.
  posemb_similarity.png      Fig. 7 centre: for every patch position (tile), the cosine
                             similarity of its position embedding to all others
                             (viridis, -1..1).
  embedding_filters.png      Fig. 7 left: the first 28 principal components of the
                             RGB patch-embedding filters.
  attention_distance.png     Fig. 7 right: mean attention distance in pixels of every
                             head against depth.
  mae_reconstruction.png     for a checkpoint pre-trained with the 'mae' objective (its
                             workdir holds the decoder, mae_params.npz): each image,
                             the visible 25% of its patches, the decoder's
                             reconstruction, and that pasted into the visible patches.
Figures that need images (rollout, distance, reconstructions) are written only when
images are given; MLP-Mixers have only the filters; hybrids have no RGB filters.
`summary_images` gives the first two as uint8 arrays for TensorBoard.
"""
from collections.abc import Mapping, Sequence
import io
import os
import re
from typing import Any, Optional, Union

from flax import traverse_util
import flax.linen as nn
import jax
import numpy as np
from PIL import Image

from vit_jax import checkpoint
from vit_jax import fileio
from vit_jax import models
from vit_jax.inference import images as images_lib
from vit_jax.inference import load
from vit_jax.models import families
from vit_jax.models import mae
from vit_jax.parallel import sharding

# viridis at 0, 1/4, 1/2, 3/4 and 1 (matplotlib's perceptually uniform colormap).
_VIRIDIS = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98],
                     [253, 231, 37]], np.float64)
_GAP = 2            # white pixels between tiles of a grid picture
_MIN_SIDE = 128     # summary images are upscaled to at least this many pixels
_DISPLAY_SIZE = 224  # side of the input drawn under the rollout in written figures


# ----------------------------------------------------------------------------
# Array helpers.


def to_uint8(images: np.ndarray) -> np.ndarray:
  """Float images in [-1, 1] -> uint8 in [0, 255]."""
  return np.clip(np.round((np.asarray(images) + 1.0) * 127.5), 0, 255).astype(np.uint8)


def colormap(values: np.ndarray, low: float = -1.0, high: float = 1.0) -> np.ndarray:
  """Maps values in [low, high] to viridis uint8 RGB (..., 3)."""
  t = np.clip((np.asarray(values, np.float64) - low) / (high - low), 0.0, 1.0)
  pos = t * (len(_VIRIDIS) - 1)
  i = np.minimum(pos.astype(int), len(_VIRIDIS) - 2)
  frac = (pos - i)[..., None]
  rgb = _VIRIDIS[i] * (1.0 - frac) + _VIRIDIS[i + 1] * frac
  return np.round(rgb).astype(np.uint8)


def tile_grid(tiles: np.ndarray, cols: int, gap: int = _GAP) -> np.ndarray:
  """Lays uint8 tiles [N, h, w, 3] out row by row, `cols` per row, on white."""
  n, h, w, _ = tiles.shape
  rows = -(-n // cols)
  out = np.full((rows * h + (rows - 1) * gap, cols * w + (cols - 1) * gap, 3),
                255, np.uint8)
  for k, tile in enumerate(tiles):
    r, c = divmod(k, cols)
    out[r * (h + gap):r * (h + gap) + h, c * (w + gap):c * (w + gap) + w] = tile
  return out


def upscale(images: np.ndarray, factor: int) -> np.ndarray:
  """Nearest-neighbour upscaling of [..., h, w, C] by an integer factor."""
  if factor == 1:
    return images
  return np.repeat(np.repeat(images, factor, axis=-3), factor, axis=-2)


# ----------------------------------------------------------------------------
# What the model says: attention weights and parameters.


def has_attention(model: nn.Module) -> bool:
  """Whether the model's family records softmax attention weights."""
  return models.family_of(model).attention_fields is not None


def _has_token(model: nn.Module) -> bool:
  return models.family_of(model).class_token(model)


def _prefix(model: nn.Module) -> int:
  """Tokens before the patches in the attention (class, distillation, registers)."""
  return models.family_of(model).prefix_tokens(model)


def _posemb_prefix(model: nn.Module) -> int:
  """Leading rows of the position embedding that belong to no patch."""
  return models.family_of(model).posemb_prefix_tokens(model)


def attention_weights(model: nn.Module, params: Mapping[str, Any],
                      images: np.ndarray) -> np.ndarray:
  """Softmax attention of every block, float32 [layers, N, heads, tokens, tokens]."""
  family = models.family_of(model)
  if family.attention_fields is None:
    raise ValueError(f'{type(model).__name__} has no attention; attention pictures '
                     'need a model with attention (ViT or hybrid).')
  # The same model computing attention in XLA, block by block, so weights are recorded.
  plain = model.clone(**family.attention_fields)

  @jax.jit
  def run(params, images):
    _, state = plain.apply({'params': params}, images, train=False,
                           mutable=['intermediates'])
    # Sown in call order, i.e. by depth.
    return [v[0] for k, v in traverse_util.flatten_dict(state['intermediates']).items()
            if k[-1] == 'attention_weights']

  weights = run(params, np.asarray(images, np.float32))
  return np.stack([np.asarray(sharding.to_host(w)) for w in weights]).astype(np.float32)


def patch_grid(model: nn.Module, params: Mapping[str, Any]) -> tuple[int, int]:
  """(rows, cols) of the patch grid the parameters were trained on."""
  tokens = models.family_of(model).patch_tokens(model, params)
  return families.square_grid(tokens, 'The position embeddings')


def posemb(model: nn.Module, params: Mapping[str, Any]) -> Any:
  """The learned position embeddings [1, tokens, D], or None if the family has none."""
  path = models.family_of(model).posemb_path
  return None if path is None else families.get_path(params, path)


# ----------------------------------------------------------------------------
# Fig. 6: attention rollout.


def attention_rollout(weights: np.ndarray, has_token: Union[bool, int],
                      grid: tuple[int, int],
                      class_token: Optional[bool] = None) -> np.ndarray:
  """Rollout maps float32 [N, rows, cols] in [0, 1] from [layers, N, heads, T, T] weights.

  Heads are averaged, the residual connection is added as identity, rows are
  renormalised and the layers multiplied (Abnar & Zuidema, 2020). `has_token`
  counts the prefix tokens (a bool: one class token or none); their columns are
  skipped. The map is the class token's row (`class_token`, default: any prefix),
  or else the mean row of the patch tokens.
  """
  att = weights.mean(axis=2)
  att = att + np.eye(att.shape[-1], dtype=att.dtype)
  att = att / att.sum(axis=-1, keepdims=True)
  joint = att[0]
  for layer in att[1:]:
    joint = layer @ joint
  ntok = int(has_token)
  class_token = bool(ntok) if class_token is None else class_token
  rows = joint[:, 0, ntok:] if class_token else joint[:, ntok:, ntok:].mean(axis=1)
  maps = rows.reshape(len(rows), *grid)
  maps = maps / np.maximum(maps.max(axis=(1, 2), keepdims=True), 1e-12)
  return maps.astype(np.float32)


def _rollout_panels(image: np.ndarray, heat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(uint8 image weighted by the map, the map upsampled to the image in [0, 1])."""
  h, w = image.shape[:2]
  mask = Image.fromarray(heat.astype(np.float32)).resize((w, h), Image.BILINEAR)
  mask = np.clip(np.asarray(mask), 0.0, 1.0)
  return np.round(image * mask[..., None]).astype(np.uint8), mask


def rollout_pictures(images: np.ndarray, maps: np.ndarray) -> np.ndarray:
  """uint8 [N, H, 3W, 3]: input | input weighted by the upsampled map | the map (viridis).

  The middle panel is the paper's Fig. 6; the heat map also reads on dark images.
  """
  pictures = []
  for image, heat in zip(to_uint8(images), maps):
    masked, mask = _rollout_panels(image, heat)
    pictures.append(np.concatenate([image, masked, colormap(mask, 0.0, 1.0)],
                                   axis=1))
  return np.stack(pictures)


# ----------------------------------------------------------------------------
# Fig. 7: position embeddings, embedding filters, attention distance.


def posemb_similarity(posemb: np.ndarray, has_token: Union[bool, int],
                      grid: tuple[int, int]) -> np.ndarray:
  """Cosine similarities [rows, cols, rows, cols] between patch position embeddings.

  `has_token` counts the leading rows that belong to no patch (a bool: one).
  """
  emb = np.asarray(posemb, np.float64)[0, int(has_token):]
  emb = emb / np.maximum(np.linalg.norm(emb, axis=-1, keepdims=True), 1e-12)
  return (emb @ emb.T).reshape(*grid, *grid).astype(np.float32)


def render_posemb_similarity(sim: np.ndarray) -> np.ndarray:
  """uint8 [H, W, 3]: one tile per patch position, laid out on the patch grid."""
  rows, cols = sim.shape[:2]
  cell = max(1, 32 // max(rows, cols))
  tiles = upscale(colormap(sim.reshape(rows * cols, rows, cols)), cell)
  return tile_grid(tiles, cols)


def embedding_kernel(model: nn.Module, params: Mapping[str, Any]) -> np.ndarray:
  """The patch-embedding kernel [ph, pw, 3, D] on RGB pixels."""
  kernel = models.family_of(model).rgb_filters(model, params)
  if kernel is None:
    raise ValueError('Hybrid models embed ResNet features, not RGB pixels; their '
                     'filters cannot be shown as pictures.')
  return np.asarray(kernel, np.float32)


def filter_components(kernel: np.ndarray, count: int = 28) -> np.ndarray:
  """The first `count` principal components [count, ph, pw, C] of the D filters."""
  ph, pw, c, d = kernel.shape
  filters = kernel.reshape(ph * pw * c, d).T.astype(np.float64)
  filters = filters - filters.mean(axis=0)
  _, _, vt = np.linalg.svd(filters, full_matrices=False)
  count = min(count, len(vt))
  return vt[:count].reshape(count, ph, pw, c).astype(np.float32)


def render_filters(components: np.ndarray, cols: int = 7) -> np.ndarray:
  """uint8 grid of components, each stretched to its own [0, 255] range."""
  lo = components.min(axis=(1, 2, 3), keepdims=True)
  hi = components.max(axis=(1, 2, 3), keepdims=True)
  tiles = np.round(255 * (components - lo) / np.maximum(hi - lo, 1e-12))
  factor = max(1, 48 // components.shape[1])
  return tile_grid(upscale(tiles.astype(np.uint8), factor), min(cols, len(tiles)))


def mean_attention_distance(weights: np.ndarray, has_token: Union[bool, int],
                            grid: tuple[int, int], stride: int) -> np.ndarray:
  """Mean distance in pixels [layers, heads] between query and attended patches.

  Weights over the patch keys are renormalised (prefix tokens, `has_token` of
  them, have no position) and averaged over patch queries and images.
  """
  ntok = int(has_token)
  rows, cols = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]), indexing='ij')
  centres = np.stack([rows.ravel(), cols.ravel()], axis=-1) * float(stride)
  dist = np.linalg.norm(centres[:, None] - centres[None], axis=-1)
  att = weights[..., ntok:, ntok:].astype(np.float64)
  att = att / np.maximum(att.sum(axis=-1, keepdims=True), 1e-12)
  per_query = (att * dist).sum(axis=-1)            # [L, N, heads, patches]
  return per_query.mean(axis=(1, 3)).astype(np.float32)


def render_attention_distance(distance: np.ndarray, image_size: int) -> np.ndarray:
  """uint8 [440, 400, 3] scatter plot: one dot per head against network depth."""
  fig = new_figure(4, 4.4)
  ax = fig.add_subplot(1, 1, 1)
  ax.set_title('Mean attention distance (ViT Fig. 7 right)', fontsize=9)
  layers, heads = distance.shape
  for h in range(heads):
    ax.scatter(np.arange(1, layers + 1), distance[:, h], s=12,
               label=f'head {h + 1}' if heads <= 16 else None)
  ax.set_xlabel('Network depth (layer)')
  ax.set_ylabel('Mean attention distance (pixels)')
  ax.set_ylim(0, image_size)
  ax.set_xlim(0.5, layers + 0.5)
  if heads <= 16:
    ax.legend(fontsize=6, ncol=2, loc='lower right')
  _caption(fig, 'Each dot: one head; mean distance from a patch to what it attends to.')
  fig.tight_layout(rect=(0, 0.06, 1, 1))
  return figure_pixels(fig)


# ----------------------------------------------------------------------------
# Labelled figures for files: title, axes, colour bar and a caption (matplotlib).


def new_figure(width: float, height: float) -> Any:
  """An off-screen matplotlib Figure of width x height inches at 100 dpi."""
  # Imported here so that TensorBoard summaries and training never load matplotlib.
  from matplotlib import figure  # pylint: disable=g-import-not-at-top
  from matplotlib.backends import backend_agg  # pylint: disable=g-import-not-at-top
  fig = figure.Figure(figsize=(width, height), dpi=100)
  backend_agg.FigureCanvasAgg(fig)
  return fig


def figure_pixels(fig: Any) -> np.ndarray:
  """uint8 [H, W, 3] of a drawn figure."""
  fig.canvas.draw()
  return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


def _caption(fig: Any, text: str) -> None:
  fig.text(0.5, 0.01, text, ha='center', va='bottom', fontsize=7, wrap=True,
           color='0.25')


def _viridis_bar(fig: Any, ax: Any, low: float, high: float, label: str) -> None:
  """A colour bar of the same viridis the tiles are drawn with."""
  from matplotlib import cm  # pylint: disable=g-import-not-at-top
  from matplotlib import colors  # pylint: disable=g-import-not-at-top
  cmap = colors.LinearSegmentedColormap.from_list('vit_viridis', _VIRIDIS / 255.0)
  bar = cm.ScalarMappable(norm=colors.Normalize(low, high), cmap=cmap)
  fig.colorbar(bar, ax=ax, fraction=0.046, pad=0.03, label=label)


def labelled_rollout(image: np.ndarray, heat: np.ndarray, name: str) -> np.ndarray:
  """Fig. 6 for one input: input | input x rollout | rollout map with its colour bar."""
  image = to_uint8(image)
  masked, mask = _rollout_panels(image, heat)
  fig = new_figure(10, 3.8)
  axes = fig.subplots(1, 3)
  axes[0].imshow(image)
  axes[0].set_title('input', fontsize=9)
  axes[1].imshow(masked)
  axes[1].set_title('input x attention rollout', fontsize=9)
  axes[2].imshow(colormap(mask, 0.0, 1.0))
  axes[2].set_title('attention rollout', fontsize=9)
  for ax in axes:
    ax.set_xticks([])
    ax.set_yticks([])
  _viridis_bar(fig, axes[2], 0.0, 1.0, 'attention to the patch (max = 1)')
  fig.suptitle(f'{name}: attention rollout (ViT Fig. 6)', fontsize=11)
  _caption(fig, 'Attention of the output token to each patch through all layers: '
           'heads averaged, residual added, layers multiplied (Abnar & Zuidema, 2020).')
  fig.subplots_adjust(left=0.01, right=0.93, top=0.85, bottom=0.08, wspace=0.05)
  return figure_pixels(fig)


def labelled_posemb_similarity(sim: np.ndarray) -> np.ndarray:
  """Fig. 7 centre with patch row/column axes, a -1..1 colour bar and a caption."""
  rows, cols = sim.shape[:2]
  grid = render_posemb_similarity(sim)
  tile_h = (grid.shape[0] + _GAP) / rows
  tile_w = (grid.shape[1] + _GAP) / cols
  fig = new_figure(5.6, 5)
  ax = fig.add_subplot(1, 1, 1)
  ax.imshow(grid, interpolation='nearest')
  step = max(1, -(-max(rows, cols) // 12))  # at most ~12 tick labels per axis
  ax.set_xticks([(c + 0.5) * tile_w - _GAP / 2 for c in range(0, cols, step)],
                [str(c + 1) for c in range(0, cols, step)])
  ax.set_yticks([(r + 0.5) * tile_h - _GAP / 2 for r in range(0, rows, step)],
                [str(r + 1) for r in range(0, rows, step)])
  ax.tick_params(length=0, labelsize=8)
  ax.set_xlabel('Input patch column')
  ax.set_ylabel('Input patch row')
  ax.set_title('Position embedding similarity (ViT Fig. 7 centre)', fontsize=10)
  _viridis_bar(fig, ax, -1.0, 1.0, 'cosine similarity')
  _caption(fig, 'Tile (row, column): similarity of that patch\'s position embedding '
           'to the position embeddings of all patches.')
  fig.subplots_adjust(left=0.1, right=0.86, top=0.92, bottom=0.14)
  return figure_pixels(fig)


def labelled_filters(components: np.ndarray) -> np.ndarray:
  """Fig. 7 left with a title and a caption."""
  grid = render_filters(components)
  fig = new_figure(6, 4.2)
  ax = fig.add_subplot(1, 1, 1)
  ax.imshow(grid, interpolation='nearest')
  ax.set_xticks([])
  ax.set_yticks([])
  ph, pw = components.shape[1:3]
  ax.set_title(f'RGB embedding filters: first {len(components)} principal components '
               '(ViT Fig. 7 left)', fontsize=9)
  _caption(fig, f'Each tile: one principal component of the {ph}x{pw}-pixel RGB '
           'patch-embedding filters, stretched to its own range.')
  fig.subplots_adjust(left=0.03, right=0.97, top=0.9, bottom=0.1)
  return figure_pixels(fig)


def labelled_mae_reconstruction(images: np.ndarray, masked: np.ndarray,
                                recon: np.ndarray, pasted: np.ndarray,
                                names: Sequence[str], mask_ratio: float) -> np.ndarray:
  """MAE's figure: per image (row) the input, its visible patches, the reconstruction."""
  titles = ('input', f'visible patches ({1 - mask_ratio:.0%})',
            'reconstruction', 'reconstruction + visible')
  rows = len(images)
  fig = new_figure(8, 2.1 * rows + 0.8)
  axes = np.asarray(fig.subplots(rows, 4)).reshape(rows, 4)
  for r in range(rows):
    for c, panel in enumerate((images, masked, recon, pasted)):
      ax = axes[r, c]
      ax.imshow(to_uint8(panel[r]), interpolation='nearest')
      ax.set_xticks([])
      ax.set_yticks([])
      if r == 0:
        ax.set_title(titles[c], fontsize=9)
    axes[r, 0].set_ylabel(names[r], fontsize=8)
  fig.suptitle('Masked autoencoder reconstructions (MAE, He et al. Fig. 2)', fontsize=11)
  _caption(fig, f'{mask_ratio:.0%} of each image\'s patches are hidden from the encoder '
           '(grey); the decoder predicts their pixels (each patch\'s own mean and '
           'spread restored for display).')
  fig.subplots_adjust(left=0.06, right=0.99, top=1 - 0.6 / (2.1 * rows + 0.8),
                      bottom=0.35 / (2.1 * rows + 0.8), wspace=0.04, hspace=0.08)
  return figure_pixels(fig)


def mae_reconstructions(loaded: load.LoadedModel, options: Mapping[str, Any],
                        decoder_path: str, images: np.ndarray, names: Sequence[str],
                        seed: int = 0) -> np.ndarray:
  """The labelled reconstruction figure of MAE's decoder (from decoder_path) on images."""
  options = dict(options)
  normalized = bool(options.pop('norm_pix_loss', True))
  autoencoder = mae.MaskedAutoencoder(loaded.model, **options)
  decoder = checkpoint.load(decoder_path)
  params = {'model': loaded.params, 'decoder': decoder}
  grey, recon, pasted = jax.device_get(jax.jit(
      lambda p, x: mae.reconstruction(autoencoder, p, x, jax.random.PRNGKey(seed),
                                      normalized))(params, images))
  return labelled_mae_reconstruction(images, grey, recon, pasted, names,
                                     autoencoder.mask_ratio)


# ----------------------------------------------------------------------------
# Entry points: TensorBoard summaries and the command line.


def summary_images(model: nn.Module, params: Mapping[str, Any],
                   sample_images: np.ndarray) -> dict[str, np.ndarray]:
  """Attention rollout [N, H, 3W, 3] and posemb similarity [1, H', W', 3], uint8.

  Images smaller than 128 pixels are upscaled (nearest) to stay legible. A model
  without attention (MLP-Mixer) has neither picture and gets an empty dict.
  """
  if not has_attention(model):
    return {}
  images = np.asarray(sample_images, np.float32)
  if images.ndim != 4 or images.shape[-1] != 3:
    raise ValueError(f'summary_images: expected images [N, H, W, 3], got '
                     f'{images.shape}.')
  grid = patch_grid(model, params)
  maps = attention_rollout(attention_weights(model, params, images),
                           _prefix(model), grid, class_token=_has_token(model))
  rollout = rollout_pictures(images, maps)
  out = {'attention_rollout': upscale(rollout, -(-_MIN_SIDE // rollout.shape[1]))}
  embeddings = posemb(model, params)
  if embeddings is not None:
    similarity = render_posemb_similarity(posemb_similarity(
        np.asarray(sharding.to_host(embeddings)), _posemb_prefix(model), grid))
    out['posemb_similarity'] = similarity[None]
  return out


def write_png(image: np.ndarray, path: str) -> None:
  """Writes a uint8 [H, W, 3] image as PNG, atomically (no half-written files)."""
  buffer = io.BytesIO()
  Image.fromarray(np.asarray(image, np.uint8)).save(buffer, format='PNG')
  fileio.atomic_write(path, buffer.getvalue())


def rollout_names(image_paths: Sequence[str]) -> list[str]:
  """attention_rollout_<stem>.png per input; repeated stems get _2, _3, ..."""
  names, seen = [], {}
  for path in image_paths:
    stem = os.path.splitext(os.path.basename(os.fspath(path)))[0]
    stem = re.sub(r'[^A-Za-z0-9_.-]+', '_', stem) or 'image'
    seen[stem] = seen.get(stem, 0) + 1
    suffix = f'_{seen[stem]}' if seen[stem] > 1 else ''
    names.append(f'attention_rollout_{stem}{suffix}.png')
  return names


def write_figures(loaded: load.LoadedModel, image_paths: Sequence[str],
                  out_dir: str, checkpoint_path: str = '') -> list[str]:
  """Writes every figure that applies to the model into `out_dir`; returns the paths.

  `checkpoint_path` (the file `loaded` came from) lets a self-supervised run's workdir
  add its own figure (MAE's reconstructions).
  """
  fileio.check_output_dir(out_dir, '--out')
  # Read every input before writing anything, so a bad image leaves no partial output.
  images = (np.stack([images_lib.load_image(p, loaded.resolution) for p in image_paths])
            if image_paths else None)
  # Rollouts are drawn over the input at a legible size, whatever the model's.
  display_size = max(_DISPLAY_SIZE, loaded.resolution)
  display = [images_lib.load_image(p, display_size) for p in image_paths]
  model, params = loaded.model, loaded.params
  family = models.family_of(model)
  figures = {}
  embeddings = posemb(model, params)
  if embeddings is not None:
    figures['posemb_similarity.png'] = labelled_posemb_similarity(posemb_similarity(
        embeddings, _posemb_prefix(model), patch_grid(model, params)))
  if images is not None and has_attention(model):
    grid = patch_grid(model, params)
    weights = attention_weights(model, params, images)
    maps = attention_rollout(weights, _prefix(model), grid,
                             class_token=_has_token(model))
    for path, name, image, heat in zip(image_paths, rollout_names(image_paths),
                                       display, maps):
      figures[name] = labelled_rollout(image, heat, os.path.basename(path))
    distance = mean_attention_distance(
        weights, _prefix(model), grid, load.model_stride(model))
    figures['attention_distance.png'] = render_attention_distance(
        distance, loaded.resolution)
  objective = load.workdir_objective(checkpoint_path) if checkpoint_path else None
  if images is not None and objective is not None and objective[0] == 'mae':
    names = [os.path.basename(p) for p in image_paths]
    figures['mae_reconstruction.png'] = mae_reconstructions(
        loaded, objective[1], objective[2], images, names)
  if family.rgb_filters(model, params) is not None:
    figures['embedding_filters.png'] = labelled_filters(
        filter_components(embedding_kernel(model, params)))
  os.makedirs(out_dir, exist_ok=True)
  written = []
  for name, picture in figures.items():
    path = os.path.join(out_dir, name)
    write_png(picture, path)
    written.append(path)
  return written
