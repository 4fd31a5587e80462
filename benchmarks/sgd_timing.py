"""The timed loop the PyTorch image references share: SGD (lr 0.01,
momentum 0.9) steps of cross-entropy on one fixed batch, warm-up steps
untimed, then timed steps until `steps` or `max_seconds` (at least one)."""
import statistics
import time

import torch
import torch.nn.functional as F


def time_sgd_steps(model, images, labels, warmup, steps, max_seconds):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []

    def step():
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())

    for _ in range(warmup):
        step()
    times = []
    start = time.perf_counter()
    while len(times) < steps and (not times or time.perf_counter() - start < max_seconds):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {"median_s": med, "best_s": min(times), "steps": len(times),
            "images_per_s": images.shape[0] / med, "loss_first": losses[0],
            "loss_last": losses[-1]}
