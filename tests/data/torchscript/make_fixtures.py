#!/usr/bin/python3
"""Regenerates the TorchScript and NumPy test fixtures in this directory.

Needs Debian's python3-torch and python3-numpy (the same torch version as
libtorch-dev, so the archives load in hsgd). The test suite itself needs no
Python: the outputs are committed.

    /usr/bin/python3 tests/data/torchscript/make_fixtures.py
"""
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def out(name):
    return os.path.join(HERE, name)


class Mlp(nn.Module):
    """8 features -> 16 -> 3 classes (scripted)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class BnCnn(nn.Module):
    """The BatchNorm + dropout CNN of the learning test: 1x28x28 -> 10."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


class TinyBnCnn(nn.Module):
    """A small CNN with BatchNorm for 1x8x8 inputs, 3 classes (traced)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(x, 1))


class LeNet5(nn.Module):
    """hsgd's --model lenet5 (28x28 padded by 2), for the speed comparison."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 6, 5, padding=2)
        self.c2 = nn.Conv2d(6, 16, 5)
        self.f1 = nn.Linear(400, 120)
        self.f2 = nn.Linear(120, 84)
        self.f3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = torch.flatten(x, 1)
        return self.f3(F.relu(self.f2(F.relu(self.f1(x)))))


class NoParams(nn.Module):
    def forward(self, x):
        return x[:, :3]


class ThreeDimOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(x).unsqueeze(1)


class Wide(nn.Module):
    """Expects 20 features (the fixtures have 8)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 3)

    def forward(self, x):
        return self.fc(x)


def blobs(n, d, classes, seed):
    """Gaussian blobs: n x d float32 features, int64 labels."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 2.0, size=(classes, d))
    y = np.arange(n) % classes
    rng.shuffle(y)
    x = centres[y] + rng.normal(0, 1.0, size=(n, d))
    return x.astype(np.float32), y.astype(np.int64)


def main():
    torch.manual_seed(1)
    torch.jit.script(Mlp()).save(out("mlp_scripted.pt"))
    torch.jit.script(BnCnn()).save(out("bn_cnn_scripted.pt"))
    tiny = TinyBnCnn().train()
    torch.jit.trace(tiny, torch.randn(4, 1, 8, 8)).save(out("bn_cnn_traced.pt"))
    torch.jit.script(LeNet5()).save(out("lenet5_scripted.pt"))
    torch.jit.script(NoParams()).save(out("no_params.pt"))
    torch.jit.script(ThreeDimOutput()).save(out("bad_output.pt"))
    torch.jit.script(Wide()).save(out("wide.pt"))
    torch.jit.script(Mlp().double()).save(out("float64.pt"))
    torch.save(Mlp().state_dict(), out("state_dict.pt"))  # not TorchScript

    x, y = blobs(300, 8, 3, seed=2)
    np.save(out("blobs_x.npy"), x.astype(np.float64))
    np.save(out("blobs_y.npy"), y)
    # 8x8 images for the tiny CNN: the blobs' class plus noise, one channel.
    rng = np.random.default_rng(3)
    pats = rng.normal(0, 1.5, size=(3, 1, 8, 8))
    yi = np.arange(300) % 3
    xi = (pats[yi] + rng.normal(0, 1.0, size=(300, 1, 8, 8))).astype(np.float32)
    np.savez_compressed(out("images.npz"), x=xi, y=yi.astype(np.uint8),
                        x_test=xi[:60], y_test=yi[:60].astype(np.uint8))


if __name__ == "__main__":
    main()
