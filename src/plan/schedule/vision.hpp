// torchvision models as the walker replays them: ResNet (conv, BatchNorm, in-place ReLU and
// residual adds, max-pool indices) and VisionTransformer.
#pragma once

#include "ops.hpp"

namespace vramkit::plan::detail {

/// Forward and loss of one micro-batch of a ResNet; returns the loss.
tensor resnet_forward_loss(walker& w);

/// Forward and loss of one micro-batch of a VisionTransformer; returns the loss.
tensor vit_forward_loss(walker& w);

}  // namespace vramkit::plan::detail
