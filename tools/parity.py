"""The verdict both parity tools print: every relative error, then PASS/FAIL."""
import sys
from typing import NoReturn, Sequence


def report_and_exit(rows: Sequence[tuple[str, float]],
                    tolerance: float) -> NoReturn:
  """Prints each (label, relative error) row and exits 0 iff all are under tolerance."""
  worst = max((err for _, err in rows), default=0.0)
  for label, err in rows:
    print(f'{label:60s} rel_err={err:.3e}')
  ok = worst < tolerance
  print(f'{"PASS" if ok else "FAIL"}: worst relative error {worst:.3e} '
        f'(tolerance {tolerance:g})')
  sys.exit(0 if ok else 1)
