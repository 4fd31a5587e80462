"""PyTorch side of `gpipe_bench amoebanet`: W5 of shared/BENCHMARKS.md,
AmoebaNet-D(N, F) written from the definition there (torchgpipe's v0.0.7
model with global average pooling before the classifier).

    python amoebanet_torch.py --threads 2 [--true-maxpool] [--batch 64]

--true-maxpool makes max_pool_3x3 a real MaxPool2d(3, s, 1), as gpipe's zoo
does by default; without it, max_pool_3x3 is torchgpipe's AvgPool2d quirk.
Prints one JSON object on stdout.
"""
import argparse
import json
import resource


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--num-normal", type=int, default=2, help="N")
    p.add_argument("--filters", type=int, default=32, help="F")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--true-maxpool", action="store_true")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--max-seconds", type=float, default=30.0)
    return p.parse_args()


ARGS = parse_args()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from sgd_timing import time_sgd_steps  # noqa: E402

torch.set_num_threads(ARGS.threads)
torch.set_num_interop_threads(1)


def rcb(cin, cout, k=1, s=1, p=0):
    """ReLU -> Conv2d (no bias) -> BatchNorm2d."""
    return nn.Sequential(nn.ReLU(inplace=False), nn.Conv2d(cin, cout, k, s, p, bias=False), nn.BatchNorm2d(cout))


class FactorizedReduce(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.relu = nn.ReLU(inplace=False)
        self.conv1 = nn.Conv2d(cin, cout // 2, 1, 2, bias=False)
        self.conv2 = nn.Conv2d(cin, cout // 2, 1, 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        x = self.relu(x)
        shifted = F.pad(x[:, :, 1:, 1:], (0, 1, 0, 1))
        return self.bn(torch.cat([self.conv1(x), self.conv2(shifted)], dim=1))


def conv_1x1(c, s):
    return rcb(c, c, 1, s, 0)


def conv_3x3(c, s):
    return nn.Sequential(rcb(c, c // 4, 1), rcb(c // 4, c // 4, 3, s, 1), rcb(c // 4, c, 1))


def conv_1x7_7x1(c, s):
    return nn.Sequential(rcb(c, c // 4, 1), rcb(c // 4, c // 4, (1, 7), (1, s), (0, 3)),
                         rcb(c // 4, c // 4, (7, 1), (s, 1), (3, 0)), rcb(c // 4, c, 1))


def avg_pool_3x3(c, s):
    return nn.AvgPool2d(3, s, padding=1, count_include_pad=False)


def max_pool_3x3(c, s):
    if ARGS.true_maxpool:
        return nn.MaxPool2d(3, s, padding=1)
    return nn.AvgPool2d(3, s, padding=1, count_include_pad=False)  # torchgpipe's quirk


def max_pool_2x2(c, s):
    return nn.MaxPool2d(2, s, padding=0)


def none(c, s):
    return nn.Identity() if s == 1 else FactorizedReduce(c, c)


NORMAL = [((1, conv_1x1), (1, max_pool_3x3)), ((1, none), (0, conv_1x7_7x1)), ((0, conv_1x1), (0, conv_1x7_7x1)),
          ((2, max_pool_3x3), (2, none)), ((1, avg_pool_3x3), (5, conv_1x1))]
NORMAL_CONCAT = [0, 3, 4, 6]
REDUCTION = [((0, max_pool_2x2), (0, max_pool_3x3)), ((2, none), (1, conv_3x3)), ((2, conv_1x7_7x1), (2, max_pool_3x3)),
             ((3, none), (1, max_pool_2x2)), ((2, avg_pool_3x3), (3, conv_1x1))]
REDUCTION_CONCAT = [4, 5, 6]


class Cell(nn.Module):
    def __init__(self, c_pp, c_p, c, reduction, reduction_prev):
        super().__init__()
        self.preprocess0 = rcb(c_p, c, 1)
        if reduction_prev:
            self.preprocess1 = FactorizedReduce(c_pp, c)
        elif c_pp != c:
            self.preprocess1 = rcb(c_pp, c, 1)
        else:
            self.preprocess1 = nn.Identity()
        genotype = REDUCTION if reduction else NORMAL
        self.concat = REDUCTION_CONCAT if reduction else NORMAL_CONCAT
        self.inputs, ops = [], []
        for a, b in genotype:
            for i, make in (a, b):
                stride = 2 if reduction and i < 2 else 1
                self.inputs.append(i)
                ops.append(make(c, stride))
        self.ops = nn.ModuleList(ops)

    def forward(self, prev, prev_prev):
        states = [self.preprocess0(prev), self.preprocess1(prev_prev)]
        for node in range(5):
            a, b = 2 * node, 2 * node + 1
            states.append(self.ops[a](states[self.inputs[a]]) + self.ops[b](states[self.inputs[b]]))
        return torch.cat([states[i] for i in self.concat], dim=1), prev


class AmoebaNetD(nn.Module):
    def __init__(self, num_normal, filters, num_classes=10, in_channels=3):
        super().__init__()
        c = filters // 4
        self.stem = nn.Sequential(nn.ReLU(inplace=False), nn.Conv2d(in_channels, c, 3, 2, 1, bias=False),
                                  nn.BatchNorm2d(c))
        plan = [(2 * c, True), (4 * c, True)] + [(4 * c, False)] * num_normal + [(8 * c, True)]
        plan += [(8 * c, False)] * num_normal + [(16 * c, True)] + [(16 * c, False)] * num_normal
        c_pp, c_p, reduction_prev = c, c, False
        cells = []
        for cc, reduction in plan:
            cells.append(Cell(c_pp, c_p, cc, reduction, reduction_prev))
            c_pp, c_p, reduction_prev = c_p, cc * (len(REDUCTION_CONCAT) if reduction else len(NORMAL_CONCAT)), reduction
        self.cells = nn.ModuleList(cells)
        self.fc = nn.Linear(c_p, num_classes)

    def forward(self, x):
        s = self.stem(x)
        prev, prev_prev = s, s
        for cell in self.cells:
            prev, prev_prev = cell(prev, prev_prev)
        return self.fc(prev.mean(dim=(2, 3)))


def main():
    a = ARGS
    torch.manual_seed(0)
    model = AmoebaNetD(a.num_normal, a.filters)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(7)
    images = torch.randn(a.batch, 3, a.size, a.size, generator=g)
    labels = torch.randint(0, 10, (a.batch,), generator=g)
    result = time_sgd_steps(model, images, labels, a.warmup, a.steps, a.max_seconds)
    result.update({"params": params, "true_maxpool": a.true_maxpool, "torch": torch.__version__,
                   "threads": torch.get_num_threads(),
                   "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})
    print(json.dumps(result), flush=True)

if __name__ == "__main__":
    main()
