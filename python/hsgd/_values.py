"""Python values as the override text `hsgd train --set KEY=VALUE` takes."""
import math
import numbers


def toml_string(s):
    """`s` as a TOML basic string (never read as a number or a date)."""
    out = ['"']
    for ch in str(s):
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def override_text(value):
    """A value of set= as --set text. A str is passed as written (--set
    semantics: a TOML value, bare words are strings); numbers, booleans and
    lists are written as TOML."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        v = float(value)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        text = repr(v)
        return text if any(c in text for c in ".eE") else text + ".0"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(
            toml_string(v) if isinstance(v, str) else override_text(v) for v in value) + "]"
    raise ValueError(f"set: value {value!r}: expected a string, number, boolean or list")
