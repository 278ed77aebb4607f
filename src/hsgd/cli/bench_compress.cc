// hsgd bench --compress: the cost of each compressor ([compress], issue 14)
// on one real gradient, against the time to compute that gradient, on one
// core; and the bytes of one push message against the uncompressed push.
#include <fmt/format.h>

#include <chrono>

#include "hsgd/cli/bench_common.h"
#include "hsgd/cli/commands.h"
#include "hsgd/compress/stage.h"
#include "hsgd/core/stats.h"
#include "hsgd/data/readers.h"
#include "hsgd/data/spec.h"
#include "hsgd/model/model.h"
#include "hsgd/runtime/clock.h"

namespace hsgd::cli {
namespace {

using Clock = SteadyClock;

}  // namespace

int bench_compress(const BenchArgs& a) {
  LoadedData loaded = load_data(a.data, SyntheticOptions{});
  const Dataset& train = loaded.train;
  const int batch = 64;
  const ModelSpec spec = bench_spec(a.model, train);
  GradientLoop loop(spec, train, batch, 5);
  Model* m = &loop.model();
  const std::vector<float>& p = loop.params();
  const std::vector<float>& g = loop.grads();
  std::vector<double> gt;
  for (int i = 0; i < 20; ++i) {
    loop.next_batch();
    const auto t0 = Clock::now();
    loop.gradient();
    gt.push_back(since(t0));
  }
  const double grad_s = median(gt);
  const std::vector<std::vector<int64_t>> shapes = m->param_shapes();
  const std::vector<TensorSlot> layout = make_layout(shapes, 0, p.size());
  std::printf(
      "hsgd bench --compress: %s on %s, %zu parameters (%zu tensors), batch %d; gradient "
      "%.3f ms (median of 20)\n",
      spec.name.c_str(), train.name.c_str(), p.size(), shapes.size(), batch, grad_s * 1e3);
  std::printf("cost = worker encode + error feedback + server decode of one push, median of %d\n\n",
              a.repeats * 4);
  std::printf("%-14s %12s %10s %12s %12s %10s\n", "compressor", "bytes/push", "ratio", "encode ms",
              "decode ms", "% of grad");
  const size_t plain = 4 * p.size();
  std::string bytes;
  std::vector<float> sent(p.size()), out(p.size());
  for (const char* name :
       {"none", "fp16", "bf16", "topk:0.01", "randomk:0.01", "qsgd:16", "sign", "powersgd:2"}) {
    CompressOptions o;
    o.push = parse_compressor(name, "bench");
    PushStage stage(o, layout, 1, 0);
    PushDecoder decoder(o, layout);
    std::vector<double> enc, dec;
    for (int i = 0; i < a.repeats * 4; ++i) {
      const auto t0 = Clock::now();
      stage.compress(g, 0, &bytes, sent);
      enc.push_back(since(t0));
      const auto t1 = Clock::now();
      decoder.decode(bytes, out, "bench");
      dec.push_back(since(t1));
    }
    const double e = median(enc), d = median(dec);
    std::printf("%-14s %12zu %10.1f %12.3f %12.3f %9.1f%%\n", name, bytes.size(),
                static_cast<double>(plain) / static_cast<double>(bytes.size()), e * 1e3, d * 1e3,
                100.0 * (e + d) / grad_s);
    std::fflush(stdout);
  }
  std::printf(
      "\nbytes/push is the message as it travels (header included); ratio = %zu plain bytes / "
      "bytes/push. 'none' here still runs the codec (a raw copy); with compress.push = none "
      "the runtimes skip the stage entirely.\n",
      plain);
  return 0;
}

}  // namespace hsgd::cli
