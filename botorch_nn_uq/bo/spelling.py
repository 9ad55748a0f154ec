r"""The one spelling of named parts with arguments: ``name(key=value, ...)``.

A strategy (:mod:`botorch_nn_uq.bo.strategy`) is spelled from such parts, e.g.
``deep-ensemble(max_steps=200):ts+turbo+bts+local(4)``; a surrogate with hyperparameter
overrides is one of them (``deep-ensemble(max_steps=200)``). This module reads and
writes a part; it knows no names.

Values are integers, floats (``1e-3``, ``inf``), ``true``/``false``, ``none`` or bare
words; written back, each reads as the same value.
"""

from __future__ import annotations

import math
import re

#: A part's name: lower-case letters, digits, ``-``, ``_`` and ``.``.
NAME_PATTERN = r"[a-z0-9][a-z0-9_.\-]*"
_PART = re.compile(rf"^({NAME_PATTERN})(?:\((.*)\))?$")
_KEY = re.compile(r"^[a-z_][a-z0-9_]*$")
_INTEGER = re.compile(r"^[+-]?\d+$")
_WORD = re.compile(r"^[A-Za-z0-9_.\-]+$")

#: A value of an argument.
Value = int | float | bool | str | None


class SpellingError(ValueError):
    r"""A spelling that cannot be read; the message says where and why."""


def split_top_level(text: str, separator: str) -> list[str]:
    r"""``text`` split at ``separator`` outside parentheses.

    Example:
        >>> split_top_level("ts+local(4)+turbo(a=1)", "+")
        ['ts', 'local(4)', 'turbo(a=1)']
    """
    parts, depth, start = [], 0, 0
    for index, character in enumerate(text):
        if character == "(":
            depth += 1
        elif character == ")":
            depth -= 1
            if depth < 0:
                raise SpellingError(f"unbalanced ')' in {text!r}")
        elif character == separator and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if depth:
        raise SpellingError(f"unbalanced '(' in {text!r}")
    parts.append(text[start:])
    return parts


def parse_value(text: str) -> Value:
    r"""The value a written argument stands for.

    Example:
        >>> parse_value("200"), parse_value("1e-3"), parse_value("true"), parse_value("relu")
        (200, 0.001, True, 'relu')
    """
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    if _INTEGER.match(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        pass
    if not _WORD.match(text):
        raise SpellingError(f"{text!r} is not a number, true, false, none or a word")
    return text


def format_value(value: Value) -> str:
    r"""How ``value`` is written (read back by :func:`parse_value` as the same value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    text = str(value)
    if isinstance(value, str) and (not _WORD.match(text) or parse_value(text) != text):
        raise SpellingError(f"the word {text!r} cannot be written as an argument")
    return text


def parse_part(text: str) -> tuple[str, list[Value], dict[str, Value]]:
    r"""A part's name, positional arguments and keyword arguments.

    Example:
        >>> parse_part("deep-ensemble(max_steps=200, learning_rate=1e-3)")
        ('deep-ensemble', [], {'max_steps': 200, 'learning_rate': 0.001})
    """
    text = text.strip()
    match = _PART.match(text)
    if match is None:
        raise SpellingError(
            f"{text!r} is not NAME or NAME(ARGUMENTS) (names are lower case: letters, "
            "digits, '-', '_' and '.')"
        )
    name, inside = match.group(1), match.group(2)
    positional: list[Value] = []
    keywords: dict[str, Value] = {}
    if inside is None:
        return name, positional, keywords
    if not inside.strip():
        raise SpellingError(f"{text!r}: empty parentheses (leave them out)")
    for argument in split_top_level(inside, ","):
        key, equals, value = argument.partition("=")
        if not equals:
            if keywords:
                raise SpellingError(f"{text!r}: a positional argument after a keyword one")
            positional.append(parse_value(argument.strip()))
            continue
        key = key.strip()
        if not _KEY.match(key):
            raise SpellingError(f"{text!r}: {key!r} is not an argument name")
        if key in keywords:
            raise SpellingError(f"{text!r}: {key} is given twice")
        keywords[key] = parse_value(value.strip())
    return name, positional, keywords


def format_part(name: str, *positional: Value, **keywords: Value) -> str:
    r"""A part written: ``name``, then its arguments in parentheses (keywords sorted).

    Example:
        >>> format_part("deep-ensemble", max_steps=200)
        'deep-ensemble(max_steps=200)'
    """
    arguments = [format_value(value) for value in positional]
    arguments += [f"{key}={format_value(keywords[key])}" for key in sorted(keywords)]
    return name if not arguments else f"{name}({','.join(arguments)})"
