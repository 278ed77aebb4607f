#!/usr/bin/python3
"""Your own PyTorch model and NumPy data in hsgd (README: Your own model).

Defines a small CNN with BatchNorm and dropout, saves it as TorchScript,
saves Fashion-MNIST (Debian package dataset-fashion-mnist) as an .npz, and
prints the hsgd command that trains the one on the other. Needs Debian's
python3-torch and python3-numpy (optional tools: `make demo` and `make test`
do not use them).

    /usr/bin/python3 examples/torchscript/fashion_cnn.py [OUT_DIR]

Afterwards, load the trained model back:

    m = torch.jit.load("runs/own/model.pt")   # eval mode, trained weights
    logits = m(x)                             # x: N x 1 x 28 x 28, pixels in [0, 1]
"""
import gzip
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FASHION = "/usr/share/datasets/fashion-mnist"


class Net(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(16 * 7 * 7, classes)

    def forward(self, x):  # N x 1 x 28 x 28 -> N x classes logits
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


def idx(name):
    with gzip.open(os.path.join(FASHION, name)) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    # torch.jit.script keeps train()/eval() behaviour (dropout, BatchNorm);
    # torch.jit.trace would freeze the mode it was traced in.
    model_path = os.path.join(out, "fashion_cnn.pt")
    torch.jit.script(Net()).save(model_path)

    data_path = os.path.join(out, "fashion.npz")
    np.savez_compressed(
        data_path,
        x=idx("train-images-idx3-ubyte.gz")[:, None],  # uint8, N x 1 x 28 x 28
        y=idx("train-labels-idx1-ubyte.gz"),
        x_test=idx("t10k-images-idx3-ubyte.gz")[:, None],
        y_test=idx("t10k-labels-idx1-ubyte.gz"),
    )
    print(f"wrote {model_path} and {data_path}; now train:")
    print(f"  build/release/hsgd train --model torchscript:{model_path} "
          f"--data npz:{data_path} --workers 2 --policy hybrid --lr 0.05 "
          f"--epochs 2 --out runs/own")


if __name__ == "__main__":
    main()
