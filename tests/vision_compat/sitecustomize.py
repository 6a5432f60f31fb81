"""Started with every Python process of the image-folder test, when torchvision cannot be
imported here (scripts/setup.sh installs it aside into .venv/vision then).

PyPI's Linux torchvision wheel is built for CUDA torch; next to a CPU-only torch (these
machines and CI: no CPU build of torchvision is published for torch 2.13 on PyPI) its
compiled operators cannot load, and `import torchvision` then fails with "operator
torchvision::nms does not exist": two fake-tensor registrations (nms, qnms) are not
guarded by `_has_ops()` as the others are (pytorch/vision#9337; the fix,
pytorch/vision#9649, guards them). Defining the two schemas lets the import go on;
the parts the test uses (datasets.ImageFolder, transforms.v2) are Python and never call
them, and a call to either raises torch's error for an operator with no kernel.
"""

import torch

_TORCHVISION = torch.library.Library("torchvision", "DEF")
_TORCHVISION.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_TORCHVISION.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
