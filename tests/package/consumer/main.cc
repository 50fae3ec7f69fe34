// Consumer of the installed package: the tiled forward against the fp64 reference on a small
// causal GQA case through the installed headers and libburst. Exit 0 only when they agree.
#include <burst/burst.h>
#include <burst/splitmix64.h>
#include <burst/version.h>

#include <cmath>
#include <cstdio>

int main() {
  const std::int64_t B = 1, S = 40, H = 4, H_kv = 2, D = 16;
  burst::Tensor q({B, S, H, D}), k({B, S, H_kv, D}), v({B, S, H_kv, D});
  burst::SplitMix64 rng(12345);
  for (burst::Tensor* t : {&q, &k, &v})
    for (std::int64_t i = 0; i < t->numel(); ++i) t->data()[i] = static_cast<float>(2 * rng.uniform() - 1);
  burst::AttentionParams p;
  p.mask.causal = true;
  const burst::AttentionOutput tiled = burst::attention_forward(q.view(), k.view(), v.view(), p);
  p.impl = burst::KernelImpl::Reference;
  const burst::AttentionOutput ref = burst::attention_forward(q.view(), k.view(), v.view(), p);
  double worst = 0;
  for (std::int64_t i = 0; i < ref.out.numel(); ++i)
    worst = std::fmax(worst, std::fabs(static_cast<double>(tiled.out.data()[i]) - ref.out.data()[i]));
  std::printf("burst %s consumer: max |tiled - reference| = %.3g\n", BURST_VERSION_STRING, worst);
  return worst < 1e-5 ? 0 : 1;
}
