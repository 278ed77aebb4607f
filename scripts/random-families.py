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

--shift draws families outside that distribution (issue 32's eighth study):
the same draw, then three features none of the families above has, each
drawn independently:
- data split over the workers: iid 0.25, dirichlet with alpha
  log-uniform in [0.1, 1] 0.5, shards of 2 classes per worker 0.25;
- network: 0.25 as above (independent links of 1.25e9 B/s, 0.1 ms);
  0.75 shared links whose bandwidth puts the server's link under a load
  L log-uniform in [0.1, 4] (L = 2 x 4 P n / (bandwidth x compute_time):
  the share of the link one round trip of every worker per compute time
  needs, P the model's parameters), latency log-uniform in [0.1, 2] ms;
- push compression: none 0.5, fp16 0.2, topk:0.1 0.15, qsgd:16 0.15,
  priced at 1 ns per parameter (fixed, so runs agree).
Names: shift-SEED-NN.

Usage: scripts/random-families.py --seed 2026 --count 12 --out examples/sweep/random
       [--rules 16,18] [--shift]"""
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


def parameters(model, hidden, features, classes):
    """The model's parameter count, as hsgd's model zoo builds it."""
    if model == "lenet5":
        return 6 * 25 + 6 + 16 * 6 * 25 + 16 + 400 * 120 + 120 + 120 * 84 + 84 + 84 * classes + classes
    widths = [features, *hidden, classes]
    return sum(a * b + b for a, b in zip(widths, widths[1:]))


def shift(rng, s, desc, size, n):
    """The --shift features: a non-IID split, a slow shared network, push compression."""
    split = pick(rng, [("iid", 0.25), ("dirichlet", 0.5), ("shards", 0.25)])
    if split == "dirichlet":
        s["data.partition"] = '"dirichlet"'
        s["data.alpha"] = sig(loguniform(rng, 0.1, 1))
        desc.append(f"split by Dirichlet({s['data.alpha']})")
    elif split == "shards":
        s["data.partition"] = '"shards"'
        s["data.classes_per_worker"] = 2
        desc.append("split in shards of 2 classes per worker")
    else:
        desc.append("split iid")
    if rng.random() < 0.75:
        load = loguniform(rng, 0.1, 4)
        s["sim.network"] = '"shared"'
        s["sim.bandwidth"] = sig(2 * 4 * size * n / (load * 0.1))
        s["sim.latency"] = sig(loguniform(rng, 1e-4, 2e-3))
        desc.append(f"shared links of {s['sim.bandwidth']} B/s (server link load {load:.2g}), "
                    f"latency {s['sim.latency']} s")
    else:
        desc.append("fast independent links")
    push = pick(rng, [("none", 0.5), ("fp16", 0.2), ("topk:0.1", 0.15), ("qsgd:16", 0.15)])
    if push != "none":
        s["compress.push"] = f'"{push}"'
        s["compress.sim_ns_per_param"] = 1.0
        desc.append(f"pushes compressed with {push}")
    else:
        desc.append("no compression")


def family(rng, index, seed, rules=(16,), shifted=False):
    model = pick(rng, [("softmax", 0.25), ("mlp1", 0.3), ("mlp2", 0.2), ("lenet5", 0.25)])
    s = {"sim.threads": 1}
    desc = []
    hidden, features, classes = [], 784, 10
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
        hidden = [width]
        desc.append(f"an MLP ({width} hidden)")
    elif model == "mlp2":
        widths = sorted((rng.choice([32, 64, 128, 256]) for _ in range(rng.choice([2, 3]))), reverse=True)
        s["model.name"] = '"mlp"'
        s["model.hidden"] = '"' + ",".join(map(str, widths)) + '"'
        hidden = widths
        desc.append(f"an MLP ({', '.join(map(str, widths))} hidden)")
    else:
        desc.append("LeNet-5")
    if data == "synthetic":
        s["data.synthetic_seed"] = 1000 + seed % 1000 * 10 + index
        s["data.synthetic_features"] = rng.randint(10, 60)
        s["data.synthetic_classes"] = rng.randint(2, 12)
        s["data.synthetic_noise"] = sig(rng.uniform(0.5, 1.5))
        features, classes = s["data.synthetic_features"], s["data.synthetic_classes"]
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
    if shifted:
        shift(rng, s, desc, parameters(model, hidden, features, classes), n)
    policies = ["sync", "async"]
    if mu:
        policies.append("async+staleness.momentum_correction=true")
    policies += [f"kasync:{k}" for k in (2, 4, 8, 16) if k < n and (k < 16 or n >= 20)]
    policies += ["hybrid", "ssp:3"] + [f"auto+policy.auto_rule={r}" for r in rules]
    name = f"{'shift' if shifted else 'random'}-{seed}-{index:02d}"
    text = "\n".join([
        f'# Random held-out family {name} for auto (issue 32), drawn by',
        *([f'# scripts/random-families.py --seed {seed}{rules_flag(rules)} --shift and committed',
           '# before any policy ran on it; no rule or constant is chosen from its results.']
          if shifted else
          [f'# scripts/random-families.py --seed {seed}{rules_flag(rules)} and committed before any',
           '# policy ran on it; no rule or constant is chosen from its results.']),
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
        # auto's rules alone, as the draws were made (the pilot is auto's
        # default since issue 32's ninth study)
        "policy.auto_pilot = 0  # auto without its pilot, as these runs were made (see docs/auto.md)",
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
    ap.add_argument("--shift", action="store_true",
                    help="draw outside the distribution: non-IID splits, slow shared links, "
                         "push compression (names shift-SEED-NN)")
    ap.add_argument("--rules", default="16",
                    help="the auto rules each family runs, comma-separated (the first is the "
                         "sweep's candidate); default 16")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    for i in range(1, a.count + 1):
        name, text = family(rng, i, a.seed, tuple(int(r) for r in a.rules.split(",")), a.shift)
        with open(os.path.join(a.out, name + ".toml"), "w") as f:
            f.write(text)
        print(name)


if __name__ == "__main__":
    main()
