"""Your own nn.Module on your own arrays: three policies on the simulator, plotted."""
import matplotlib.pyplot as plt
import numpy as np
import torch

import hsgd

# Your data (here 10 Gaussian blobs in 20 dimensions) and your model.
rng = np.random.default_rng(0)
y = rng.integers(0, 10, 6000)
X = (rng.normal(0, 1.5, (10, 20))[y] + rng.normal(0, 1, (6000, 20))).astype(np.float32)
model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

fig, ax = plt.subplots()
for policy in ["sync", "async", "hybrid"]:
    # 16 simulated workers, half of them stragglers delayed by |N(0, 0.25)| s per gradient.
    run = hsgd.train(model, data=(X[:5000], y[:5000]), test=(X[5000:], y[5000:]),
                     policy=policy, runtime="sim", workers=16, budget=20, seed=1,
                     set={"stragglers.fraction": 0.5, "stragglers.sigma": 0.25})
    ax.plot(run.metrics["time_s"], run.metrics["test_acc"], label=policy)
ax.set(xlabel="virtual training time (s)", ylabel="test accuracy")
ax.legend()
fig.savefig("compare_policies.png")
print("wrote compare_policies.png")
