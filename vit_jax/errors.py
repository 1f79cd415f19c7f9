"""What every stage's one-line errors share: the first line of an exception's message."""


def first_line(error: BaseException | str, limit: int | None = 200) -> str:
  """The first line of an error's message, at most `limit` characters (None: all).

  An exception without a message gives its type's name, so the line is never empty.
  """
  lines = str(error).strip().splitlines()
  if not lines:
    return type(error).__name__ if isinstance(error, BaseException) else ''
  return lines[0].strip()[:limit]
