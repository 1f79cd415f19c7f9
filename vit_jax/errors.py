"""What every stage's one-line errors share: the first line of an exception's message."""


def first_line(error: BaseException | str, limit: int = 200, *,
               with_type: bool = False) -> str:
  """The first non-empty line of an error's message (at most `limit` characters).

  An exception without a message gives its type's name; `with_type` prefixes the
  type (`OSError: ...`), for errors whose kind is part of the story.
  """
  lines = str(error).strip().splitlines()
  name = type(error).__name__ if isinstance(error, BaseException) else ''
  if not lines:
    return name
  text = lines[0].strip()[:limit]
  return f'{name}: {text}' if with_type and name else text
