"""Helpers the study scripts share for reading and writing sweep files
(examples/sweep/*.toml)."""
import json
import os
import tomllib


def flat(d, prefix=""):
    """A sweep file's nested [set] table as {"section.key": value}."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


def toml_value(v):
    """A Python value as TOML (the types sweep files use)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return repr(v)


def one_policy_sweep(src, policy, path, extra=None, drop=(), relative=False):
    """Writes to `path` the sweep file `src` with `policy` as its only policy
    (no candidate), its config path made absolute (relative to `path`'s
    folder with `relative`), the [set] keys in `drop` left out and those of
    `extra` ({"section.key": value}) added."""
    with open(src, "rb") as f:
        s = tomllib.load(f)
    config = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(src)), s["config"]))
    if relative:
        config = os.path.relpath(config, os.path.dirname(os.path.abspath(path)))
    lines = [f"config = {json.dumps(config)}", f"seeds = {toml_value(s['seeds'])}",
             f"policies = [{json.dumps(policy)}]", "", "[set]"]
    for k, v in flat(s.get("set", {})).items():
        if k not in drop:
            lines.append(f"{k} = {toml_value(v)}")
    for k, v in (extra or {}).items():
        lines.append(f"{k} = {toml_value(v)}")
    lines += ["", "[axes]"]
    for k, v in flat(s["axes"]).items():
        lines.append(f"{k} = {toml_value(v)}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
