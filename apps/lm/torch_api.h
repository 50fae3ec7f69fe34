// apps/lm/torch_api.h — the part of libtorch the language model uses, instead of <torch/torch.h>:
// tensors and their factories and operators (torch/types.h: ATen plus the autograd-aware
// factories), custom autograd functions and torch::autograd::grad, and torch::manual_seed,
// NoGradGuard, set_num_threads (torch/utils.h). <torch/torch.h> adds the nn modules, optimizers,
// data loaders, serialization and the JIT: 11.5 MB preprocessed against 8.8 MB, and 36 s against
// 22 s to compile the header alone (GCC 12, -O3, this project's 2-core build host), which every
// language-model translation unit paid.
#pragma once

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/types.h>
#include <torch/utils.h>
