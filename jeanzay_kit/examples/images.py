"""Image classification from a folder of image files, through torchvision.

`data=image_folder` reads `root/<class>/<image>` files with torchvision's `ImageFolder`
(PIL decodes them, in the loader workers), transformed by `image_transforms`: for
training a random resized crop and a random horizontal flip, drawn from torch's generator,
which the toolkit seeds per sample (a resumed run augments each sample as the straight
one did); for validation a resize and a center crop. `model=image_cnn` is a small
convolutional classifier. torchvision is an optional extra: pip install 'jeanzay_kit[vision]'.
"""

from __future__ import annotations

import torch
from torch import nn


def image_transforms(size: int = 32, train: bool = True, scale: float = 0.6):
    """torchvision.transforms.v2: (random crop, flip) or (resize, center crop), then a
    float tensor in [0, 1], normalised per channel to about zero mean."""
    from torchvision.transforms import v2

    if train:
        shape = [v2.RandomResizedCrop(size, scale=(scale, 1.0), antialias=True)]
        shape.append(v2.RandomHorizontalFlip())
    else:
        shape = [v2.Resize(size, antialias=True), v2.CenterCrop(size)]
    return v2.Compose(
        [
            v2.ToImage(),
            *shape,
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25]),
        ]
    )


class ImageCNN(nn.Module):
    """Three conv-BN-ReLU blocks (each halving the resolution), global average pooling
    and a linear classifier: logits [batch, num_classes] for RGB images of any size."""

    def __init__(self, num_classes: int = 10, width: int = 16):
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for out in (width, 2 * width, 4 * width):
            layers += [
                nn.Conv2d(channels, out, 3, padding=1, bias=False),
                nn.BatchNorm2d(out),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            channels = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(channels, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).mean(dim=(2, 3)))
