"""Sphinx directive `results-table`: a table generated from a docs/results/*.csv file.

    ```{results-table} quickstart_seeds.csv
    :columns: setup, seed, test_accuracy
    :where: table=recipes
    ```

The cells are MyST Markdown (code, bold, links). Every row of a results file also names its
command, versions, machine and date; the table's caption points at the file that holds them,
so a re-measurement changes the CSV and the page follows.
"""
import csv
import os

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

RESULTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'results')
PROVENANCE = ('command', 'versions', 'machine', 'date')


def read_rows(name: str) -> tuple[list[str], list[dict[str, str]]]:
  """Returns the header and the rows of docs/results/NAME."""
  with open(os.path.join(RESULTS_DIR, name), newline='') as f:
    reader = csv.DictReader(f)
    return list(reader.fieldnames or ()), list(reader)


def _wanted(row: dict[str, str], where: list[tuple[str, str]]) -> bool:
  return all(row.get(key) == value for key, value in where)


class ResultsTable(SphinxDirective):
  """Renders the chosen columns of a results CSV as a table."""

  required_arguments = 1
  option_spec = {
      'columns': directives.unchanged,
      'headers': directives.unchanged,
      'where': directives.unchanged,
  }

  def run(self) -> list[nodes.Node]:
    name = self.arguments[0]
    self.env.note_dependency(os.path.join(RESULTS_DIR, name))
    try:
      header, rows = read_rows(name)
    except OSError as e:
      raise self.error(f'results-table: cannot read docs/results/{name}: {e}') from e
    columns = [c.strip() for c in self.options.get('columns', '').split(',') if c.strip()]
    columns = columns or [c for c in header if c not in PROVENANCE]
    missing = [c for c in columns if c not in header]
    if missing:
      raise self.error(f'results-table: docs/results/{name} has no column {missing}')
    titles = [t.strip() for t in self.options.get('headers', '').split('|')] if 'headers' in self.options else columns
    if len(titles) != len(columns):
      raise self.error('results-table: :headers: needs one title per column, split by |')
    where = [tuple(part.split('=', 1)) for part in self.options.get('where', '').split(';') if '=' in part]
    rows = [r for r in rows if _wanted(r, where)]
    if not rows:
      raise self.error(f'results-table: no row of docs/results/{name} matches {where}')
    table = nodes.table(classes=['results-table'])
    group = nodes.tgroup(cols=len(columns))
    table += group
    group.extend(nodes.colspec(colwidth=1) for _ in columns)
    group += self._row_group(nodes.thead, [titles])
    group += self._row_group(nodes.tbody, [[r[c] for c in columns] for r in rows])
    dates = sorted({r.get('date', '') for r in rows} - {''})
    caption = nodes.paragraph(classes=['results-source'])
    caption += nodes.Text('Measured ' + (f'{dates[0]}' if len(dates) == 1 else f'{dates[0]} to {dates[-1]}' if dates else '')
                          + '; every row with its command, versions and machine: ')
    caption += nodes.literal(text=f'docs/results/{name}')
    return [table, caption]

  def _row_group(self, kind, cell_rows: list[list[str]]) -> nodes.Element:
    group = kind()
    for cells in cell_rows:
      row = nodes.row()
      for text in cells:
        entry = nodes.entry()
        parsed, messages = self.state.inline_text(text, self.lineno)
        entry += nodes.paragraph('', '', *parsed)
        entry += messages
        row += entry
      group += row
    return group


def setup(app) -> dict:
  """Registers the directive."""
  app.add_directive('results-table', ResultsTable)
  return {'parallel_read_safe': True, 'parallel_write_safe': True}
