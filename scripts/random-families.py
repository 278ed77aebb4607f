#!/usr/bin/env python3
"""Random held-out families for auto (issue 32).

Every held-out family so far was chosen by hand, most of them to probe a
known weakness (server momentum below the budget), so their miss rate is
not the rate a user meets. This draws families at random from a
distribution declared here, from a seed, and writes them as sweep files
(examples/sweep/random/FAMILY.toml). The files are committed before any
policy runs on them; no rule or constant is chosen from their results.

The distribution (each family: two cells, one learning rate from each
band of q = lr / (1 - mu) x n, the momentum-amplified rate times the
workers, which decides how much waiting pays):
- model: softmax 0.25, an MLP with one hidden layer (32, 64 or 128) 0.3,
  an MLP with two or three (widths from 32 to 256) 0.2, LeNet-5 0.25;
- data: LeNet-5 on Fashion-MNIST; the others Fashion-MNIST 0.4 or a new
  synthetic draw 0.6 (10 to 60 features, 2 to 12 classes, noise 0.5 to 1.5,
  data seed 1000 + 10 x (seed mod 1000) + the family's index: draws of
  neighbouring seeds can share a data seed, and with other features and
  classes still draw another data set);
- workers: log-uniform from 4 to 48 (LeNet-5 at most 16, for time);
  batch 8, 16, 32 or 64;
- stragglers: a fraction of 0, 1/8, 1/4 or 1/2 of the workers; delay
  halfnormal (sigma 0.05 to 0.5 s), exponential (mean 0.05 to 0.3 s) or
  lognormal (scale 0.05 to 0.2 s, sigma 0.3 to 1); slowdown 1, 1.5 or 2;
- optimizer: sgd 0.4, momentum 0.4 (mu 0.8, 0.9 or 0.95), nesterov 0.9 0.2;
- learning rates: q log-uniform in [0.1, 0.6] and in [0.6, 12].
Policies: sync, async, kasync:2, 4, 8 (and 16 with 20 or more workers),
hybrid, ssp:3, with server momentum also async with the momentum
correction, and the auto rules --rules names (the first the sweep's
candidate; default the sixteenth). 3 seeds, 100
virtual s.

Usage: scripts/random-families.py --seed 2026 --count 12 --out examples/sweep/random
       [--rules 16,18]"""
import argparse
import math
import os
import random
import textwrap


def wrap(text):
    return ["# " + line for line in textwrap.wrap(text, 74)]


def pick(rng, weighted):
    r = rng.random() * sum(w for _, w in weighted)
    for value, w in weighted:
        r -= w
        if r <= 0:
            return value
    return weighted[-1][0]


def loguniform(rng, lo, hi):
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def sig(x, digits=2):
    """x rounded to `digits` significant figures, as TOML text."""
    return f"{float(f'{x:.{digits}g}'):g}"


def family(rng, index, seed, rules=(16,)):
    model = pick(rng, [("softmax", 0.25), ("mlp1", 0.3), ("mlp2", 0.2), ("lenet5", 0.25)])
    s = {"sim.threads": 1}
    desc = []
    if model == "lenet5":
        data = "fashion-mnist"
        base = "../../paper/fashion-mnist-lenet5.toml"
    else:
        data = pick(rng, [("fashion-mnist", 0.4), ("synthetic", 0.6)])
        base = "../../paper/" + ("fashion-mnist-lenet5.toml" if data == "fashion-mnist" else "synthetic.toml")
    if model == "softmax":
        s["model.name"] = '"softmax"'
        desc.append("softmax regression")
    elif model == "mlp1":
        width = rng.choice([32, 64, 128])
        s["model.name"] = '"mlp"'
        s["model.hidden"] = f'"{width}"'
        desc.append(f"an MLP ({width} hidden)")
    elif model == "mlp2":
        widths = sorted((rng.choice([32, 64, 128, 256]) for _ in range(rng.choice([2, 3]))), reverse=True)
        s["model.name"] = '"mlp"'
        s["model.hidden"] = '"' + ",".join(map(str, widths)) + '"'
        desc.append(f"an MLP ({', '.join(map(str, widths))} hidden)")
    else:
        desc.append("LeNet-5")
    if data == "synthetic":
        s["data.synthetic_seed"] = 1000 + seed % 1000 * 10 + index
        s["data.synthetic_features"] = rng.randint(10, 60)
        s["data.synthetic_classes"] = rng.randint(2, 12)
        s["data.synthetic_noise"] = sig(rng.uniform(0.5, 1.5))
        desc.append(f"on a synthetic draw (seed {s['data.synthetic_seed']}: "
                    f"{s['data.synthetic_features']} features, {s['data.synthetic_classes']} classes, "
                    f"noise {s['data.synthetic_noise']})")
    else:
        desc.append("on Fashion-MNIST")
    n = int(round(loguniform(rng, 4, 16 if model == "lenet5" else 48)))
    batch = rng.choice([8, 16, 32, 64])
    s["train.workers"] = n
    s["train.batch"] = batch
    desc.append(f"{n} workers with batch {batch}")
    fraction = rng.choice([0.0, 0.125, 0.25, 0.5])
    s["stragglers.fraction"] = fraction
    stragglers = int(round(fraction * n))
    if stragglers:
        delay = rng.choice(["halfnormal", "exponential", "lognormal"])
        s["stragglers.delay"] = f'"{delay}"'
        if delay == "halfnormal":
            s["stragglers.sigma"] = sig(rng.uniform(0.05, 0.5))
            what = f"|N(0, {s['stragglers.sigma']})| s delays"
        elif delay == "exponential":
            s["stragglers.scale"] = sig(rng.uniform(0.05, 0.3))
            s["stragglers.sigma"] = 0.0
            what = f"exponential delays (mean {s['stragglers.scale']} s)"
        else:
            s["stragglers.scale"] = sig(rng.uniform(0.05, 0.2))
            s["stragglers.sigma"] = sig(rng.uniform(0.3, 1.0))
            what = f"lognormal delays ({s['stragglers.scale']} s x exp(N(0, {s['stragglers.sigma']})))"
        slowdown = rng.choice([1.0, 1.5, 2.0])
        if slowdown > 1:
            s["stragglers.slowdown"] = slowdown
            what += f", computing {slowdown:g}x slower"
        desc.append(f"{stragglers} of them straggling with {what}")
    else:
        desc.append("no stragglers")
    kind = pick(rng, [("sgd", 0.4), ("momentum", 0.4), ("nesterov", 0.2)])
    mu = 0.0
    if kind != "sgd":
        mu = 0.9 if kind == "nesterov" else rng.choice([0.8, 0.9, 0.95])
        s["optim.kind"] = f'"{kind}"'
        s["optim.momentum"] = mu
        desc.append(f"{kind} {mu:g}")
    else:
        desc.append("plain SGD")
    qs = [loguniform(rng, 0.1, 0.6), loguniform(rng, 0.6, 12)]
    lrs = [float(sig(q * (1 - mu) / n)) for q in qs]
    policies = ["sync", "async"]
    if mu:
        policies.append("async+staleness.momentum_correction=true")
    policies += [f"kasync:{k}" for k in (2, 4, 8, 16) if k < n and (k < 16 or n >= 20)]
    policies += ["hybrid", "ssp:3"] + [f"auto+policy.auto_rule={r}" for r in rules]
    name = f"random-{seed}-{index:02d}"
    text = "\n".join([
        f'# Random held-out family {name} for auto (issue 32), drawn by',
        f'# scripts/random-families.py --seed {seed}{rules_flag(rules)} and committed before any',
        '# policy ran on it; no rule or constant is chosen from its results.',
        *wrap(" ".join(desc[:2]) + ", " + "; ".join(desc[2:]) + "."),
        "# q = lr / (1 - mu) x n: " + ", ".join(f"{lr / (1 - mu) * n:.3g}" for lr in lrs) + ".",
        f"#   hsgd sweep examples/sweep/random/{name}.toml --out runs/random/{name} --jobs 2",
        f'config = "{base}"',
        "seeds = [1, 2, 3]",
        *textwrap.wrap("policies = [" + ", ".join(f'"{p}"' for p in policies) + "]", 96,
                       subsequent_indent="            ", break_long_words=False, break_on_hyphens=False),
        f'candidate = "auto+policy.auto_rule={rules[0]}"',
        "",
        "[set]",
        *(f"{k} = {v}" for k, v in s.items()),
        "",
        "[axes]",
        "optim.lr = [" + ", ".join(f"{lr:g}" for lr in lrs) + "]",
        "",
    ])
    return name, text


def rules_flag(rules):
    """The --rules flag as the header names it ("" for the default, 16)."""
    return "" if tuple(rules) == (16,) else " --rules " + ",".join(map(str, rules))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rules", default="16",
                    help="the auto rules each family runs, comma-separated (the first is the "
                         "sweep's candidate); default 16")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    for i in range(1, a.count + 1):
        name, text = family(rng, i, a.seed, tuple(int(r) for r in a.rules.split(",")))
        with open(os.path.join(a.out, name + ".toml"), "w") as f:
            f.write(text)
        print(name)


if __name__ == "__main__":
    main()
