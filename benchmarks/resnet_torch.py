"""PyTorch side of `gpipe_bench resnet`: a torchvision-style ResNet-50/101/152
(bottleneck blocks, stride on the 3x3 convolution, 1x1 projection shortcuts)
written out here (torchvision is not needed), with the 32x32-input stem
gpipe's zoo uses (3x3 stride-1 conv, BatchNorm, ReLU, no pooling), 10 classes.

    python resnet_torch.py --depth 101 --width 64 --batch 32 --threads 2

One SGD (lr 0.01, momentum 0.9) training step on random 3x32x32 images, timed
like gpipe's side (median after warm-up). Prints one JSON object on stdout.
"""
import argparse
import json


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--depth", type=int, default=101, choices=[50, 101, 152])
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--max-seconds", type=float, default=60.0)
    return p.parse_args()


ARGS = parse_args()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from sgd_timing import time_sgd_steps  # noqa: E402

torch.set_num_threads(ARGS.threads)
torch.set_num_interop_threads(1)

BLOCKS = {50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}


class Bottleneck(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, 4 * planes, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(4 * planes)
        self.down = None
        if stride != 1 or cin != 4 * planes:
            self.down = nn.Sequential(nn.Conv2d(cin, 4 * planes, 1, stride, bias=False),
                                      nn.BatchNorm2d(4 * planes))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class ResNet(nn.Module):
    def __init__(self, depth, width, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU())
        blocks, cin = [], width
        for g, n in enumerate(BLOCKS[depth]):
            planes = width << g
            for b in range(n):
                blocks.append(Bottleneck(cin, planes, 2 if g > 0 and b == 0 else 1))
                cin = 4 * planes
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(x.mean(dim=(2, 3)))


def main():
    a = ARGS
    torch.manual_seed(0)
    model = ResNet(a.depth, a.width)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(7)
    images = torch.randn(a.batch, 3, 32, 32, generator=g)
    labels = torch.randint(0, 10, (a.batch,), generator=g)
    result = time_sgd_steps(model, images, labels, a.warmup, a.steps, a.max_seconds)
    result.update({"params": params, "torch": torch.__version__, "threads": torch.get_num_threads()})
    print(json.dumps(result))

if __name__ == "__main__":
    main()
