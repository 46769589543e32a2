"""The two models bench/training_multihost.py trains, with their synthetic
batches: a ResNet-18 (torchvision's where it is installed, else the same
network defined here: same layers, same 11.69 M parameters) on small images,
and a stack of transformer encoder blocks on short sequences.

Both are sized so that their gradients (47 and 51 MB in float32) take longer
to cross a 1 Gbit/s link than one rank's forward and backward pass takes on
this machine's shared cores: the regime where the allreduce, not the
arithmetic, sets the step time (see MODELS for the batches)."""
import importlib.util

import torch
import torch.nn as nn

# Per model: batch per rank and the input's shape (channels x 32 x 32 images;
# tokens x width). Small images and short sequences keep one step's compute
# (measured 0.1-0.4 s for one rank at load 11-15 on this 2-core machine) near
# or below the 0.4-0.6 s a 1 Gbit/s link needs for the gradients; the
# benchmark's table reports both.
MODELS = {
    "resnet18": {"batch": 8, "input": (3, 32, 32), "classes": 1000},
    "transformer": {"batch": 2, "input": (16, 512), "classes": 512, "blocks": 4},
    # For the benchmark's own smoke test (tests/bench): seconds, not minutes.
    "tiny": {"batch": 2, "input": (8, 32), "classes": 16, "blocks": 1},
}


class BasicBlock(nn.Module):
    """ResNet's two 3x3 convolutions with a shortcut (a 1x1 convolution where
    the shape changes), as torchvision's BasicBlock."""

    def __init__(self, inputs, outputs, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inputs != outputs:
            self.downsample = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False),
                                            nn.BatchNorm2d(outputs))

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + shortcut)


def resnet18(classes):
    """torchvision.models.resnet18 where torchvision is installed; else the
    same layers built here (11,689,512 parameters at 1000 classes, as
    torchvision's)."""
    if importlib.util.find_spec("torchvision") is not None:
        import torchvision
        return torchvision.models.resnet18(num_classes=classes)
    return resnet18_here(classes)


def resnet18_here(classes):
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1)]
    width = 64
    for outputs, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(width, outputs, stride), BasicBlock(outputs, outputs, 1)]
        width = outputs
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


class TransformerStack(nn.Module):
    """Encoder blocks (8 heads, feed-forward 4 x the width) and a linear
    head that classifies every position: a language model's body without its
    embedding, fed random embeddings."""

    def __init__(self, width, classes, blocks):
        super().__init__()
        block = nn.TransformerEncoderLayer(width, 8, 4 * width, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(block, blocks, enable_nested_tensor=False)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.blocks(x)).flatten(0, 1)


def build(name):
    spec = MODELS[name]
    if name == "resnet18":
        return resnet18(spec["classes"])
    return TransformerStack(spec["input"][-1], spec["classes"], spec["blocks"])


def synthetic_batch(name, seed):
    """One batch of random inputs and labels (the same every step: the data
    pipeline is not what is measured)."""
    spec = MODELS[name]
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(spec["batch"], *spec["input"], generator=generator)
    labels = spec["batch"] * (1 if name == "resnet18" else spec["input"][0])  # per position
    y = torch.randint(0, spec["classes"], (labels,), generator=generator)
    return x, y


def parameter_count(model):
    return sum(p.numel() for p in model.parameters())
