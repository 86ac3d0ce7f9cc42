// SPDX-License-Identifier: Apache-2.0
// GPT-2 in loom (docs/18_gpt2.md): reads and writes llm.c's checkpoints and
// token shards, initializes GPT-2 with loom's Philox, and computes the
// forward pass and its mean cross-entropy on the host executor.
//
//   gpt2                                   self-check on a tiny model (CI runs this)
//   gpt2 --init random --out m.bin [--layers 2 --heads 2 --channels 64 --max-seq 16 --vocab 500 --seed 1337]
//   gpt2 --load m.bin --tokens t.bin [--batch 4 --seq 16] [--time N] [--steps N --lr 1e-4] [--grad-out g.bin]
//
// With --tokens it prints the loss of the first batch: inputs are the first
// B * T tokens of the shard, targets the same shifted by one. --steps N
// trains N steps of AdamW on that batch and prints each step's loss;
// --grad-out writes the gradients of the loss in the checkpoint's format.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <loom/loom.hpp>

#include "checkpoint.hpp"
#include "model.hpp"
#include "train.hpp"

namespace {
using loom::host;
using loom::index_t;

struct options {
  std::string init, out, load, tokens, grad_out;
  gpt2::gpt2_config config{16, 500, 2, 2, 64, 0};
  index_t batch = 4, seq = 0;
  std::uint64_t seed = 1337;
  int time = 0, steps = 0;
  double lr = 1e-4;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw loom::value_error("loom: gpt2: " + a + " needs a value (see the usage in gpt2.cu)");
    const std::string v = argv[++i];
    const auto number = [&] { return std::stoll(v); };
    if (a == "--init") o.init = v;
    else if (a == "--out") o.out = v;
    else if (a == "--load") o.load = v;
    else if (a == "--tokens") o.tokens = v;
    else if (a == "--batch") o.batch = number();
    else if (a == "--seq") o.seq = number();
    else if (a == "--seed") o.seed = static_cast<std::uint64_t>(number());
    else if (a == "--time") o.time = static_cast<int>(number());
    else if (a == "--steps") o.steps = static_cast<int>(number());
    else if (a == "--lr") o.lr = std::stod(v);
    else if (a == "--grad-out") o.grad_out = v;
    else if (a == "--layers") o.config.layers = number();
    else if (a == "--heads") o.config.heads = number();
    else if (a == "--channels") o.config.channels = number();
    else if (a == "--max-seq") o.config.max_seq = number();
    else if (a == "--vocab") o.config.vocab = number();
    else throw loom::value_error("loom: gpt2: unknown option " + a);
  }
  if (!o.init.empty() && o.init != "random") throw loom::value_error("loom: gpt2: --init takes random, not " + o.init);
  o.config.padded_vocab = gpt2::gpt2_config::pad_vocab(o.config.vocab);
  return o;
}

gpt2::parameters<host> load(const std::string& path) {
  std::vector<float> values;
  const auto config = gpt2::read_checkpoint(path, values);
  gpt2::parameters<host> p(config);
  std::copy(values.begin(), values.end(), p.storage.data());
  return p;
}

std::span<const float> all_of(const gpt2::parameters<host>& p) {
  return {p.storage.data(), static_cast<std::size_t>(p.storage.size())};
}

// The first batch of a shard: inputs tokens[0, B T), targets tokens[1, B T + 1).
struct batch {
  loom::host_tensor<std::int32_t, 2> inputs;
  loom::host_tensor<std::int64_t, 2> targets;
};
batch first_batch(const std::vector<std::uint16_t>& tokens, index_t B, index_t T, const gpt2::gpt2_config& c) {
  if (static_cast<index_t>(tokens.size()) < B * T + 1)
    throw loom::value_error("loom: gpt2: the shard holds " + std::to_string(tokens.size()) + " tokens; a batch of " +
                            std::to_string(B) + " x " + std::to_string(T) + " needs " + std::to_string(B * T + 1));
  if (T > c.max_seq)
    throw loom::value_error("loom: gpt2: sequences of " + std::to_string(T) + " tokens exceed the model's maxT " +
                            std::to_string(c.max_seq));
  batch b{loom::host_tensor<std::int32_t, 2>({B, T}), loom::host_tensor<std::int64_t, 2>({B, T})};
  for (index_t i = 0; i < B * T; ++i) {
    b.inputs.data()[i] = tokens[static_cast<std::size_t>(i)];
    b.targets.data()[i] = tokens[static_cast<std::size_t>(i) + 1];
    if (tokens[static_cast<std::size_t>(i) + 1] >= c.vocab || tokens[static_cast<std::size_t>(i)] >= c.vocab)
      throw loom::value_error("loom: gpt2: token at " + std::to_string(i) + " is outside the vocabulary of " +
                              std::to_string(c.vocab));
  }
  return b;
}

float loss_of(const gpt2::parameters<host>& p, const batch& b) {
  gpt2::activations<host> a(p.config, b.inputs.extent(0), b.inputs.extent(1));
  return gpt2::forward(p, a, b.inputs, b.targets).item();
}

// Median wall time of n forward passes after one warm-up.
double time_forward(const gpt2::parameters<host>& p, const batch& b, int n) {
  gpt2::activations<host> a(p.config, b.inputs.extent(0), b.inputs.extent(1));
  (void)gpt2::forward(p, a, b.inputs, b.targets);
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)gpt2::forward(p, a, b.inputs, b.targets).item();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Trains `steps` steps of AdamW (betas 0.9, 0.999, eps 1e-8, no weight
// decay) on one batch; returns each step's loss, computed before its update.
// With `log`, prints each step's loss and the wall time of its forward,
// backward and update.
std::vector<float> train(gpt2::parameters<host>& p, const batch& b, int steps, double lr, bool log = false) {
  using clock = std::chrono::steady_clock;
  const auto ms = [](clock::time_point t0, clock::time_point t1) {
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  };
  gpt2::activations<host> a(p.config, b.inputs.extent(0), b.inputs.extent(1));
  gpt2::gradients<host> g(p.config);
  loom::optim::adamw<host> opt({.lr = lr, .weight_decay = 0});
  opt.add(p.storage, g.storage);
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = clock::now();
    losses.push_back(gpt2::forward(p, a, b.inputs, b.targets).item());
    const auto t1 = clock::now();
    gpt2::backward(p, a, g, b.inputs, b.targets);
    const auto t2 = clock::now();
    opt.step();
    const auto t3 = clock::now();
    if (log)
      std::printf("step %d loss %.9f  forward %.1f ms  backward %.1f ms  update %.1f ms\n", s, losses.back(),
                  ms(t0, t1), ms(t1, t2), ms(t2, t3));
  }
  return losses;
}

// Expects `f` to throw loom::io_error whose message contains `needle`.
template <class F>
bool refuses(const char* what, F f, const char* needle) {
  try {
    f();
  } catch (const loom::io_error& e) {
    const bool ok = std::strstr(e.what(), needle) != nullptr;
    std::printf("  %-24s %s: %s\n", what, ok ? "refused" : "WRONG MESSAGE", e.what());
    return ok;
  }
  std::printf("  %-24s NOT REFUSED\n", what);
  return false;
}

// Writes `bytes` of `src` to `dst`, with the int32 at `at` replaced by `value` (when at >= 0).
void corrupt(const std::string& src, const std::string& dst, std::size_t bytes, long at, std::int32_t value) {
  std::vector<char> buf(std::filesystem::file_size(src));
  std::FILE* in = std::fopen(src.c_str(), "rb");
  const bool read = in && std::fread(buf.data(), 1, buf.size(), in) == buf.size();
  if (in) std::fclose(in);
  if (!read) throw loom::io_error("loom: gpt2: cannot read back " + src);
  if (at >= 0) std::memcpy(buf.data() + at * 4, &value, 4);
  std::FILE* out = std::fopen(dst.c_str(), "wb");
  const bool wrote = out && std::fwrite(buf.data(), 1, std::min(bytes, buf.size()), out) == std::min(bytes, buf.size());
  if (out) std::fclose(out);
  if (!wrote) throw loom::io_error("loom: gpt2: cannot write " + dst);
}

// Round trips through llm.c's formats, the initialization's statistics, the
// refusals of bad files, and a forward pass whose loss at initialization is
// near ln V (the logits are small) and the same bits twice.
int self_check(const options& o) {
  const auto& c = o.config;
  const index_t B = o.batch, T = o.seq > 0 ? o.seq : c.max_seq;
  std::printf("GPT-2 L%lld NH%lld C%lld maxT%lld V%lld (padded %lld): %lld parameters, batch %lld x %lld\n",
              static_cast<long long>(c.layers), static_cast<long long>(c.heads), static_cast<long long>(c.channels),
              static_cast<long long>(c.max_seq), static_cast<long long>(c.vocab),
              static_cast<long long>(c.padded_vocab), static_cast<long long>(c.parameter_count()),
              static_cast<long long>(B), static_cast<long long>(T));
  gpt2::parameters<host> p(c);
  p.init_random(o.seed);
  bool ok = true;

  const auto std_of = [](const auto& v) {
    double s = 0, s2 = 0;
    const auto h = loom::materialize(v);
    for (index_t i = 0; i < h.size(); ++i) s += h.data()[i], s2 += double(h.data()[i]) * h.data()[i];
    const double n = static_cast<double>(h.size());
    return std::sqrt(s2 / n - (s / n) * (s / n));
  };
  const double sd_w = std_of(p.qkvw), sd_r = std_of(p.fcprojw),
               sd_r_expected = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
  const auto pad = loom::materialize(p.wte.slice(loom::range(c.vocab, c.padded_vocab)));
  const bool pad_zero = std::all_of(pad.data(), pad.data() + pad.size(), [](float x) { return x == 0.0f; });
  const bool init_ok = std::abs(sd_w - 0.02) < 0.002 && std::abs(sd_r - sd_r_expected) < 0.1 * sd_r_expected && pad_zero;
  std::printf("init: std(qkvw) %.5f (0.02), std(fcprojw) %.5f (%.5f), padded wte rows zero: %s: %s\n", sd_w, sd_r,
              sd_r_expected, pad_zero ? "yes" : "no", init_ok ? "ok" : "FAILED");
  ok = ok && init_ok;

  char dir_template[] = "/tmp/loom_gpt2_XXXXXX";
  if (!mkdtemp(dir_template)) throw loom::io_error("loom: gpt2: cannot make a temporary folder");
  const std::string dir = dir_template, model_file = dir + "/model.bin", token_file = dir + "/tokens.bin",
                    bad = dir + "/bad.bin";
  gpt2::write_checkpoint(model_file, c, all_of(p));
  const auto back = load(model_file);
  const bool same = back.config.padded_vocab == c.padded_vocab && back.config.layers == c.layers &&
                    std::memcmp(back.storage.data(), p.storage.data(), all_of(p).size_bytes()) == 0;
  std::printf("checkpoint written and read back (%lld bytes): %s\n",
              static_cast<long long>(std::filesystem::file_size(model_file)), same ? "same bits" : "DIFFERENT");
  ok = ok && same;

  std::mt19937 gen(static_cast<unsigned>(o.seed));
  std::uniform_int_distribution<int> token(0, static_cast<int>(c.vocab) - 1);
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(B * T + 1));
  for (auto& t : tokens) t = static_cast<std::uint16_t>(token(gen));
  gpt2::write_tokens(token_file, tokens);
  const bool tokens_same = gpt2::read_tokens(token_file) == tokens;
  std::printf("token shard written and read back (%zu tokens): %s\n", tokens.size(), tokens_same ? "same" : "DIFFERENT");
  ok = ok && tokens_same;

  std::printf("bad files:\n");
  std::vector<float> sink;
  const auto read_bad_model = [&] { (void)gpt2::read_checkpoint(bad, sink); };
  corrupt(model_file, bad, SIZE_MAX, 0, 20240520);
  ok = refuses("checkpoint magic", read_bad_model, "magic 20240520, expected 20240326") && ok;
  corrupt(model_file, bad, SIZE_MAX, 1, 5);
  ok = refuses("checkpoint version", read_bad_model, "version 5 is not supported") && ok;
  corrupt(model_file, bad, 1024 + 100, -1, 0);
  ok = refuses("truncated checkpoint", read_bad_model, "truncated: it ends inside its parameters") && ok;
  corrupt(model_file, bad, 600, -1, 0);
  ok = refuses("truncated header", read_bad_model, "truncated: it ends inside its 256-int32 header") && ok;
  corrupt(token_file, bad, SIZE_MAX, 0, 20240326);
  ok = refuses("shard magic", [&] { (void)gpt2::read_tokens(bad); }, "not an llm.c token shard") && ok;
  corrupt(token_file, bad, 1024 + 7, -1, 0);
  ok = refuses("truncated shard", [&] { (void)gpt2::read_tokens(bad); }, "ends inside its tokens") && ok;
  std::filesystem::remove_all(dir);

  const auto b = first_batch(tokens, B, T, c);
  const float loss = loss_of(back, b), again = loss_of(back, b);
  const double ln_v = std::log(static_cast<double>(c.vocab));
  const bool loss_ok = std::isfinite(loss) && std::abs(loss - ln_v) < 0.1 && loss == again;
  std::printf("loss at initialization %.6f (ln V = %.6f), twice the same bits: %s: %s\n", loss, ln_v,
              loss == again ? "yes" : "no", loss_ok ? "ok" : "FAILED");
  ok = ok && loss_ok;

  gpt2::parameters<host> trained(c), retrained(c);
  std::copy(back.storage.data(), back.storage.data() + back.storage.size(), trained.storage.data());
  std::copy(back.storage.data(), back.storage.data() + back.storage.size(), retrained.storage.data());
  const auto losses = train(trained, b, 10, 1e-3);
  const bool falls = std::isfinite(losses.back()) && losses.front() == loss && losses.back() < losses.front() - 1.0f;
  const bool repeats = train(retrained, b, 10, 1e-3) == losses &&
                       std::memcmp(trained.storage.data(), retrained.storage.data(), all_of(p).size_bytes()) == 0;
  std::printf("10 steps of AdamW (lr 1e-3) on the batch: loss %.4f -> %.4f: %s; run twice, the same bits: %s\n",
              losses.front(), losses.back(), falls ? "falling" : "NOT FALLING", repeats ? "yes" : "NO");
  ok = ok && falls && repeats;
  std::printf("%s\n", ok ? "all checks passed" : "SOME CHECKS FAILED");
  return ok ? 0 : 1;
}

int run(const options& o) {
  if (o.init.empty() && o.load.empty()) return self_check(o);
  gpt2::parameters<host> p = o.load.empty() ? gpt2::parameters<host>(o.config) : load(o.load);
  if (o.load.empty()) p.init_random(o.seed);
  if (!o.out.empty()) {
    gpt2::write_checkpoint(o.out, p.config, all_of(p));
    std::printf("wrote %s: %lld parameters\n", o.out.c_str(), static_cast<long long>(p.config.parameter_count()));
  }
  if (o.tokens.empty()) return 0;
  const index_t T = o.seq > 0 ? o.seq : std::min<index_t>(p.config.max_seq, 64);
  const auto b = first_batch(gpt2::read_tokens(o.tokens), o.batch, T, p.config);
  if (o.steps > 0) {
    (void)train(p, b, o.steps, o.lr, true);
    return 0;
  }
  std::printf("loss %.9f\n", loss_of(p, b));
  if (!o.grad_out.empty()) {  // the gradients of this loss, as a checkpoint; NaN wherever one is not written
    gpt2::activations<host> a(p.config, b.inputs.extent(0), b.inputs.extent(1));
    gpt2::gradients<host> g(p.config);
    loom::fill(g.storage, std::numeric_limits<float>::quiet_NaN());
    for (auto* t : {&a.residual, &a.ln1, &a.qkv, &a.atty, &a.mid, &a.ln2, &a.fc, &a.fch})
      loom::fill(*t, std::numeric_limits<float>::quiet_NaN());
    (void)gpt2::forward(p, a, b.inputs, b.targets);
    gpt2::backward(p, a, g, b.inputs, b.targets);
    gpt2::write_checkpoint(o.grad_out, p.config, all_of(g));
  }
  if (o.time > 0) std::printf("forward median of %d: %.3f ms\n", o.time, time_forward(p, b, o.time));
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const loom::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: gpt2: %s\n", e.what());
    return 1;
  }
}
