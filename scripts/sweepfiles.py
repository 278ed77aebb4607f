"""Helpers the study scripts share for reading sweep files (examples/sweep/*.toml)."""


def flat(d, prefix=""):
    """A sweep file's nested [set] table as {"section.key": value}."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out
