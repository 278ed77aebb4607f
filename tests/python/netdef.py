"""The user's own model of the tests."""
import torch


class Net(torch.nn.Module):
    def __init__(self, features=20, classes=5):
        super().__init__()
        self.fc1 = torch.nn.Linear(features, 32)
        self.fc2 = torch.nn.Linear(32, classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def make_net(seed=0):
    torch.manual_seed(seed)
    return Net()
