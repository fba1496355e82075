// torchvision models as the walker replays them: ResNet (conv, BatchNorm, in-place ReLU and
// residual adds, max-pool indices) and VisionTransformer.
#pragma once

#include "ops.hpp"

namespace vramkit::plan::detail {

/// Forward and loss of one micro-batch of a ResNet; returns the loss.
tensor resnet_forward_loss(walker& w);

/// Forward and loss of one micro-batch of a VisionTransformer; returns the loss.
tensor vit_forward_loss(walker& w);

/// The head both ViTs (torchvision's and transformers') end with, from the final LayerNorm's
/// output `x`: the class tokens read through a strided view, the classifier (parameter `head`)
/// over `classes` and the loss; the autocast cache and the inputs `img` and `tgt` are dropped.
/// `eb` is the width of the embeddings. Returns the loss.
tensor class_token_loss(walker& w, tensor x, i64 b, i64 hidden, i64 classes, int head, int eb,
                        tensor img, tensor tgt);

}  // namespace vramkit::plan::detail
