"""The VTAB-1k results of a work directory: vtab.json, a text table and a bar chart.

Written once every selected task has its test accuracy, each file atomically: a killed or
unfinished sweep leaves the previous complete results (if any) as they were, never a
partial file. The overall mean is the mean over the tasks (the VTAB score); a group's
mean is over its tasks.
"""
import io
import json
import os
from typing import Any, Sequence

import numpy as np

from vit_jax import fileio
from vit_jax.cli import vtab_runs

JSON_FILE = 'vtab.json'
TABLE_FILE = 'vtab.md'
CHART_FILE = 'vtab.png'
# Bar colours per group (matplotlib's tab10 blue, orange, green; grey for the demo).
_COLOURS = {'natural': '#1f77b4', 'specialized': '#ff7f0e', 'structured': '#2ca02c',
            'demo': '#7f7f7f'}


def summarise(tasks: dict[str, dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
  """The vtab.json record: `meta`, the per-task results, per-group and overall means.

  `tasks` maps task -> {'test_accuracy': ..., ...}, in table order.
  """
  groups = {}
  for task, result in tasks.items():
    groups.setdefault(vtab_runs.group_of(task), []).append(result['test_accuracy'])
  return {
      **meta,
      'tasks': {t: {'group': vtab_runs.group_of(t), **r} for t, r in tasks.items()},
      'groups': {g: float(np.mean(v)) for g, v in groups.items()},
      'mean': float(np.mean([r['test_accuracy'] for r in tasks.values()])),
  }


def table(report: dict[str, Any]) -> str:
  """The results as a Markdown table: each task, each group's mean, the overall mean."""
  sweep = report['protocol'] == 'sweep'
  head = '| group | task | lr | steps | test accuracy |'
  rule = '|---|---|---:|---:|---:|'
  if sweep:
    head, rule = head + ' best val200 |', rule + '---:|'
  lines = [head, rule]
  for task, r in report['tasks'].items():
    row = (f"| {r['group']} | {task} | {r['setting']['lr']:g} | {r['setting']['steps']} | "
           f"{r['test_accuracy']:.4f} |")
    if sweep:
      row += f" {max(r['val200'].values()):.4f} |"
    lines.append(row)
  pad = ' |' if sweep else ''
  for group, mean in report['groups'].items():
    count = sum(1 for r in report['tasks'].values() if r['group'] == group)
    lines.append(f'| {group} | mean of {count} | | | {mean:.4f} |{pad}')
  lines.append(f"| all | mean of {len(report['tasks'])} | | | {report['mean']:.4f} |{pad}")
  return '\n'.join(lines) + '\n'


def chart_png(report: dict[str, Any]) -> bytes:
  """A bar chart of each task's test accuracy, coloured by group, with the group means."""
  # Imported here: only the report draws, and matplotlib's import costs a second.
  from matplotlib import figure  # pylint: disable=g-import-not-at-top
  from matplotlib.backends import backend_agg  # pylint: disable=g-import-not-at-top
  from matplotlib import patches  # pylint: disable=g-import-not-at-top
  names = list(report['tasks'])
  values = [report['tasks'][t]['test_accuracy'] for t in names]
  groups = [report['tasks'][t]['group'] for t in names]
  fig = figure.Figure(figsize=(max(4.0, 0.45 * len(names) + 2), 4.2), dpi=100)
  backend_agg.FigureCanvasAgg(fig)
  ax = fig.subplots()
  ax.bar(range(len(names)), values, color=[_COLOURS[g] for g in groups])
  for i, v in enumerate(values):
    ax.text(i, v + 0.01, f'{100 * v:.1f}', ha='center', va='bottom', fontsize=7)
  ax.set_xticks(range(len(names)))
  ax.set_xticklabels(names, rotation=60, ha='right', fontsize=8)
  ax.set_ylim(0, 1.08)
  ax.set_ylabel('test accuracy')
  ax.grid(axis='y', alpha=0.3)
  legend = [patches.Patch(color=_COLOURS[g], label=f'{g} ({100 * m:.1f})')
            for g, m in report['groups'].items()]
  ax.legend(handles=legend, fontsize=8, loc='lower right')
  ax.set_title(f"VTAB-1k ({report['protocol']}): mean {100 * report['mean']:.1f} over "
               f"{len(names)} tasks", fontsize=10)
  fig.tight_layout()
  buffer = io.BytesIO()
  fig.savefig(buffer, format='png')
  return buffer.getvalue()


def write(workdir: str, report: dict[str, Any]) -> list[str]:
  """Writes vtab.json, vtab.md and vtab.png into workdir, each atomically; returns their paths."""
  out = {JSON_FILE: (json.dumps(report, indent=2) + '\n').encode(),
         TABLE_FILE: table(report).encode(),
         CHART_FILE: chart_png(report)}
  paths = []
  for name, data in out.items():
    path = os.path.join(workdir, name)
    fileio.atomic_write(path, data)
    paths.append(path)
  return paths


def missing_message(missing: Sequence[str], workdir: str) -> str:
  """The line for results asked for while tasks are still unfinished."""
  return (f'{len(missing)} task(s) not finished in {workdir}: {", ".join(missing)}; '
          f'{JSON_FILE} is written once every task has its test accuracy (run the same '
          'command, with the runs\' --tasks and --protocol, to train what is left).')
