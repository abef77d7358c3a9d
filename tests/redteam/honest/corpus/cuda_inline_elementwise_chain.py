"""Honest (load_inline CUDA): tanh(1.7 x + 0.3) * 0.6 + x in one hand-written CUDA kernel (tanhf, no
fast-math), launched on the caller's current stream.
REDTEAM = {"task": "tasks/hc_elementwise_chain.py", "gate": null, "class": "load_inline_cuda", "backends": ["cuda"]}
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void chain_kernel(const float* __restrict__ x, float* __restrict__ out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        out[i] = tanhf(v * 1.7f + 0.3f) * 0.6f + v;
    }
}

torch::Tensor chain(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "x must be a CUDA float32 tensor");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    long long n = xc.numel();
    const int threads = 256;
    if (n > 0) {
        chain_kernel<<<(unsigned int)((n + threads - 1) / threads), threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
            xc.data_ptr<float>(), out.data_ptr<float>(), n);
    }
    return out;
}
"""

_ext = load_inline(name="atb_hc_elementwise_chain", cpp_sources="torch::Tensor chain(torch::Tensor x);",
                   cuda_sources=_CUDA, functions=["chain"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.chain(x)
