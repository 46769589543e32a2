"""Models for Horovod's synthetic benchmark, by name (--model)."""
import torch

__all__ = ["small_convnet"]


def small_convnet(num_classes=1000):
    """An image classifier small enough for CPU test runs: 224 x 224 RGB
    images to `num_classes` logits, with a batch-norm layer (buffers, which
    TorchState broadcasts too)."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, kernel_size=5, stride=4), torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(16, num_classes))
