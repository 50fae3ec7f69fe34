// The device check of the serial entry points (burst/tensor.h check_device): every operand of
// attention_forward, attention_backward(_with_delta), attention_delta, merge_forward, convert,
// shard and unshard, marked as living on a CUDA device, is refused with an error that names it —
// before anything reads it: the marked view points at an address no host read survives.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/error.h"
#include "burst/plan.h"
#include "burst/softmax_merge.h"
#include "burst/tensor.h"
#include "test_util.h"

namespace burst {
namespace {

constexpr Device kCuda1{DeviceKind::Cuda, 1};

TEST(Device, NamesAndParsing) {
  EXPECT_EQ(to_string(kHost), "host");
  EXPECT_EQ(to_string(kCuda1), "cuda:1");
  EXPECT_EQ(parse_device("cpu"), kHost);
  EXPECT_EQ(parse_device("host"), kHost);
  EXPECT_EQ(parse_device("cuda"), (Device{DeviceKind::Cuda, 0}));
  EXPECT_EQ(parse_device("cuda:7"), (Device{DeviceKind::Cuda, 7}));
  for (const char* bad : {"meta", "mps", "cuda:", "cuda:-1", "cuda:x", "cuda:123456"}) {
    try {
      parse_device(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(e.message().find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(TensorView{}.device, kHost);  // views are host views unless marked
  float x = 0;
  EXPECT_EQ(make_view(&x, {1}).device, kHost);
}

TEST(Device, CheckNamesTheFirstOperandElsewhereAndSkipsEmptyOnes) {
  float a = 0, b = 0;
  TensorView va = make_view(&a, {1}), vb = make_view(&b, {1});
  EXPECT_NO_THROW(check_device("f", kHost, "a", va, "b", vb));
  vb.device = kCuda1;
  try {
    check_device("f", kHost, "a", va, "b", vb);
    FAIL() << "a cuda:1 operand passed a host call";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_EQ(e.message(), "f: b is on cuda:1, but this call runs on host; move it there first");
  }
  EXPECT_NO_THROW(check_device("f", kCuda1, "b", vb));
  EXPECT_THROW(check_device("f", Device{DeviceKind::Cuda, 0}, "b", vb), Error);  // another GPU
  TensorView empty;  // an optional operand not given
  empty.device = kCuda1;
  EXPECT_NO_THROW(check_device("f", kHost, "a", va, "empty", empty));
}

/// For each operand i of `call`: the operand marked as on cuda:1, pointing at an address no
/// read survives, must make `call` throw InvalidArgument "<api>: <name> is on cuda:1".
void expect_each_operand_refused(const std::string& api, std::vector<std::pair<std::string, TensorView>> ops,
                                 const std::function<void(const std::vector<TensorView>&)>& call) {
  std::vector<TensorView> views;
  for (const auto& [name, v] : ops) views.push_back(v);
  ASSERT_NO_THROW(call(views)) << api << " refuses the host operands";
  for (std::size_t i = 0; i < ops.size(); ++i) {
    std::vector<TensorView> marked = views;
    marked[i].device = kCuda1;
    marked[i].data = reinterpret_cast<void*>(std::uintptr_t{64});  // a device address: unreadable here
    const std::string want = api + ": " + ops[i].first + " is on cuda:1, but this call runs on host";
    try {
      call(marked);
      ADD_FAILURE() << api << " accepted " << ops[i].first << " on cuda:1";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
      EXPECT_EQ(e.message().rfind(want, 0), 0u) << "expected '" << want << "...', got " << e.what();
      if (api == "attention_forward" ||
          api == "attention_backward") {  // names the twin that takes GPU memory
        EXPECT_NE(e.message().find("entry::" + api + "_on"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(Device, AttentionEntryPointsRefuseEveryOperandOnAGpu) {
  const std::int64_t B = 1, S = 5, H = 2, D = 4;
  const Tensor q = test::random_tensor({B, S, H, D}, 1), k = test::random_tensor({B, S, H, D}, 2),
               v = test::random_tensor({B, S, H, D}, 3), dout = test::random_tensor({B, S, H, D}, 4);
  Tensor out({B, S, H, D}), lse({B, H, S}), delta({B, H, S}), dq({B, S, H, D}), dk({B, S, H, D}),
      dv({B, S, H, D});
  AttentionParams p;
  p.mask = Mask::causal_mask();
  expect_each_operand_refused(
      "attention_forward",
      {{"q", q.view()}, {"k", k.view()}, {"v", v.view()}, {"out", out.view()}, {"lse", lse.view()}},
      [&](const std::vector<TensorView>& t) { attention_forward(t[0], t[1], t[2], t[3], t[4], p); });
  expect_each_operand_refused("attention_delta",
                              {{"dout", dout.view()}, {"out", out.view()}, {"delta", delta.view()}},
                              [&](const std::vector<TensorView>& t) { attention_delta(t[0], t[1], t[2]); });
  expect_each_operand_refused("attention_backward",
                              {{"dout", dout.view()},
                               {"q", q.view()},
                               {"k", k.view()},
                               {"v", v.view()},
                               {"out", out.view()},
                               {"lse", lse.view()},
                               {"dq", dq.view()},
                               {"dk", dk.view()},
                               {"dv", dv.view()}},
                              [&](const std::vector<TensorView>& t) {
                                attention_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], p);
                              });
  expect_each_operand_refused("attention_backward_with_delta",
                              {{"dout", dout.view()},
                               {"q", q.view()},
                               {"k", k.view()},
                               {"v", v.view()},
                               {"lse", lse.view()},
                               {"delta", delta.view()},
                               {"dq", dq.view()},
                               {"dk", dk.view()},
                               {"dv", dv.view()}},
                              [&](const std::vector<TensorView>& t) {
                                attention_backward_with_delta(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7],
                                                              t[8], p, false);
                              });
}

TEST(Device, MergeConvertShardAndUnshardRefuseEveryOperandOnAGpu) {
  const std::int64_t B = 1, S = 3, H = 2, D = 4;
  Tensor out({B, S, H, D}), lse({B, H, S}), out_part({B, S, H, D}), lse_part({B, H, S});
  expect_each_operand_refused(
      "merge_forward",
      {{"out", out.view()},
       {"lse", lse.view()},
       {"out_part", out_part.view()},
       {"lse_part", lse_part.view()}},
      [](const std::vector<TensorView>& t) { merge_forward(t[0], t[1], t[2], t[3]); });
  expect_each_operand_refused("convert", {{"src", out.view()}, {"dst", out_part.view()}},
                              [](const std::vector<TensorView>& t) { convert(t[0], t[1]); });
  const SequenceLayout layout = make_layout(LayoutKind::Zigzag, 2, 8);
  Tensor global({1, 8, 2, 4}), local({1, 4, 2, 4});
  expect_each_operand_refused("shard", {{"global", global.view()}, {"local", local.view()}},
                              [&](const std::vector<TensorView>& t) { shard(layout, 1, t[0], t[1]); });
  expect_each_operand_refused("unshard", {{"local", local.view()}, {"global", global.view()}},
                              [&](const std::vector<TensorView>& t) { unshard(layout, 1, t[0], t[1]); });
}

}  // namespace
}  // namespace burst
