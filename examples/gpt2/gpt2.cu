// SPDX-License-Identifier: Apache-2.0
// GPT-2 in loom (docs/18_gpt2.md): reads and writes llm.c's checkpoints and
// token shards, initializes GPT-2 with loom's Philox, and computes the
// forward pass and its mean cross-entropy, and trains, on the host executor.
//
//   gpt2                                   self-check on a tiny model (CI runs this)
//   gpt2 --init random --out m.bin [--layers 2 --heads 2 --channels 64 --max-seq 16 --vocab 500 --seed 1337]
//   gpt2 --load m.bin --tokens t.bin [--batch 4 --seq 16] [--time N] [--grad-out g.bin]
//        [--steps N --lr 1e-4 --batches first|shard --clip 1.0 --lr-schedule constant|cosine --warmup 0 --lr-min 0]
//        [--sample N --prompt 1 --top-k 1 --temperature 1]
//
// With --tokens it prints the loss of the first batch: inputs are the first
// B * T tokens of the shard, targets the same shifted by one. --steps N
// trains N steps of AdamW and prints each step's loss: on the first batch
// each step (--batches first) or on the shard's batches in order, wrapping
// (--batches shard); --clip clips the gradients' global norm; the cosine
// schedule warms up linearly over --warmup steps, then decays to --lr-min.
// --grad-out writes the gradients of the loss in the checkpoint's format.
// --sample N prints N tokens generated after the shard's first --prompt
// tokens (after training, if --steps), one at a time with a key/value
// cache: greedy (--top-k 1) or drawn from the top k (Philox stream --seed).
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
#include "sample.hpp"
#include "train.hpp"

namespace {
using loom::host;
using loom::index_t;

struct options {
  std::string init, out, load, tokens, grad_out;
  gpt2::gpt2_config config{16, 500, 2, 2, 64, 0};
  index_t batch = 4, seq = 0;
  std::uint64_t seed = 1337;
  int time = 0, steps = 0, warmup = 0, sample = 0, prompt = 1, top_k = 1;
  double temperature = 1.0;
  double lr = 1e-4, lr_min = 0, clip = 0;
  std::string batches = "first", lr_schedule = "constant";
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
    else if (a == "--lr-min") o.lr_min = std::stod(v);
    else if (a == "--lr-schedule") o.lr_schedule = v;
    else if (a == "--warmup") o.warmup = static_cast<int>(number());
    else if (a == "--clip") o.clip = std::stod(v);
    else if (a == "--batches") o.batches = v;
    else if (a == "--sample") o.sample = static_cast<int>(number());
    else if (a == "--prompt") o.prompt = static_cast<int>(number());
    else if (a == "--top-k") o.top_k = static_cast<int>(number());
    else if (a == "--temperature") o.temperature = std::stod(v);
    else if (a == "--grad-out") o.grad_out = v;
    else if (a == "--layers") o.config.layers = number();
    else if (a == "--heads") o.config.heads = number();
    else if (a == "--channels") o.config.channels = number();
    else if (a == "--max-seq") o.config.max_seq = number();
    else if (a == "--vocab") o.config.vocab = number();
    else throw loom::value_error("loom: gpt2: unknown option " + a);
  }
  if (!o.init.empty() && o.init != "random") throw loom::value_error("loom: gpt2: --init takes random, not " + o.init);
  if (o.batches != "first" && o.batches != "shard")
    throw loom::value_error("loom: gpt2: --batches takes first or shard, not " + o.batches);
  if (o.lr_schedule != "constant" && o.lr_schedule != "cosine")
    throw loom::value_error("loom: gpt2: --lr-schedule takes constant or cosine, not " + o.lr_schedule);
  if (o.clip < 0 || o.warmup < 0) throw loom::value_error("loom: gpt2: --clip and --warmup take values >= 0");
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

// One batch: inputs [B, T] and targets [B, T].
struct batch {
  loom::host_tensor<std::int32_t, 2> inputs;
  loom::host_tensor<std::int64_t, 2> targets;
  batch(index_t B, index_t T) : inputs({B, T}), targets({B, T}) {}
  void next_from(gpt2::shard_loader& l) { l.next(inputs.data(), targets.data()); }
};
gpt2::shard_loader loader_for(const std::string& path, index_t B, index_t T, const gpt2::gpt2_config& c) {
  if (T > c.max_seq)
    throw loom::value_error("loom: gpt2: sequences of " + std::to_string(T) + " tokens exceed the model's maxT " +
                            std::to_string(c.max_seq));
  return gpt2::shard_loader(path, B, T, c.vocab);
}
batch first_batch(gpt2::shard_loader l, index_t B, index_t T) {
  batch b(B, T);
  b.next_from(l);
  return b;
}

// The learning rate of step s (from 0) of n: constant, or a linear warm-up
// to lr over `warmup` steps and then a cosine decay to lr_min at step n - 1.
double learning_rate(const options& o, int s, int n) {
  if (o.lr_schedule == "constant") return o.lr;
  if (s < o.warmup) return o.lr * (s + 1) / o.warmup;
  const double progress = n - 1 > o.warmup ? static_cast<double>(s - o.warmup) / (n - 1 - o.warmup) : 1.0;
  return o.lr_min + 0.5 * (1 + std::cos(3.14159265358979323846 * progress)) * (o.lr - o.lr_min);
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

// Trains o.steps steps of AdamW (betas 0.9, 0.999, eps 1e-8, no weight
// decay, o.lr as o.lr_schedule says, gradients clipped to o.clip when > 0)
// on the first batch of `data` each step, or on its batches in order (with
// o.batches "shard"); returns each step's loss, computed before its
// update. With `log`, prints each step's loss, learning rate, gradient
// norm (with clipping) and the wall time of its forward (to the logits),
// classifier (the fused loss and gradient), backward and update.
std::vector<float> train(gpt2::parameters<host>& p, gpt2::shard_loader data, const options& o, index_t B, index_t T,
                         bool log = false) {
  using clock = std::chrono::steady_clock;
  const auto ms = [](clock::time_point t0, clock::time_point t1) {
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  };
  gpt2::activations<host> a(p.config, B, T);
  gpt2::gradients<host> g(p.config);
  loom::optim::adamw<host> opt({.lr = o.lr, .weight_decay = 0}, {.max_grad_norm = o.clip});
  opt.add(p.storage, g.storage);
  batch b(B, T);
  b.next_from(data);
  std::vector<float> losses;
  for (int s = 0; s < o.steps; ++s) {
    if (s > 0 && o.batches == "shard") b.next_from(data);
    opt.options().lr = learning_rate(o, s, o.steps);
    const auto t0 = clock::now();
    gpt2::forward_logits(p, a, b.inputs);
    const auto t1 = clock::now();
    losses.push_back(gpt2::classifier_loss(p, a, b.targets).item());
    const auto t2 = clock::now();
    gpt2::backward_from_logits(p, a, g, b.inputs);
    const auto t3 = clock::now();
    opt.step();
    const auto t4 = clock::now();
    if (log) {
      std::printf("step %d loss %.9f  lr %.3e", s, losses.back(), opt.options().lr);
      if (o.clip > 0) std::printf("  norm %.4f", opt.grad_norm().item());
      std::printf("  forward %.1f ms  classifier %.1f ms  backward %.1f ms  update %.1f ms\n", ms(t0, t1), ms(t1, t2),
                  ms(t2, t3), ms(t3, t4));
    }
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
  gpt2::write_tokens(bad, std::vector<std::uint16_t>(tokens.begin(), tokens.end() - 1));
  ok = refuses("shard of one batch less a token", [&] { (void)gpt2::shard_loader(bad, B, T, c.vocab); },
               "a batch of") && ok;
  ok = refuses("token outside the vocabulary", [&] { (void)gpt2::shard_loader(token_file, B, T, tokens[7]); },
               "is outside the vocabulary") && ok;

  // A shard of 2 B T + 5 tokens: two batches in order, then the first again.
  std::vector<std::uint16_t> shard(static_cast<std::size_t>(2 * B * T + 5));
  for (auto& t : shard) t = static_cast<std::uint16_t>(token(gen));
  const std::string shard_file = dir + "/shard.bin";
  gpt2::write_tokens(shard_file, shard);
  gpt2::shard_loader data(shard_file, B, T, c.vocab);
  bool in_order = true;
  batch next(B, T);
  for (const std::size_t first : {std::size_t{0}, static_cast<std::size_t>(B * T), std::size_t{0}}) {
    next.next_from(data);
    for (index_t i = 0; i < B * T; ++i)
      in_order = in_order && next.inputs.data()[i] == shard[first + static_cast<std::size_t>(i)] &&
                 next.targets.data()[i] == shard[first + static_cast<std::size_t>(i) + 1];
  }
  in_order = in_order && data.position() == static_cast<std::size_t>(B * T);
  std::printf("shard loader: batches at tokens 0, %lld, then 0 again (%zu tokens): %s\n",
              static_cast<long long>(B * T), shard.size(), in_order ? "ok" : "FAILED");
  ok = ok && in_order;

  options cosine = o;
  cosine.lr = 1e-3, cosine.lr_min = 1e-4, cosine.warmup = 2, cosine.lr_schedule = "cosine";
  const double lr0 = learning_rate(cosine, 0, 10), lr1 = learning_rate(cosine, 1, 10),
               lr5 = learning_rate(cosine, 5, 10), lr9 = learning_rate(cosine, 9, 10);
  const bool schedule_ok = std::abs(lr0 - 5e-4) < 1e-12 && std::abs(lr1 - 1e-3) < 1e-12 &&
                           std::abs(lr9 - 1e-4) < 1e-12 && lr5 < lr1 && lr5 > lr9 &&
                           std::abs(lr5 - (1e-4 + 0.5 * (1 + std::cos(3.14159265358979 * 3 / 7)) * 9e-4)) < 1e-12;
  std::printf("cosine schedule with 2 warm-up steps of 10: %.2e %.2e ... %.4e ... %.2e: %s\n", lr0, lr1, lr5, lr9,
              schedule_ok ? "ok" : "FAILED");
  ok = ok && schedule_ok;

  const auto b = first_batch(gpt2::shard_loader(token_file, B, T, c.vocab), B, T);
  const float loss = loss_of(back, b), again = loss_of(back, b);
  const double ln_v = std::log(static_cast<double>(c.vocab));
  const bool loss_ok = std::isfinite(loss) && std::abs(loss - ln_v) < 0.1 && loss == again;
  std::printf("loss at initialization %.6f (ln V = %.6f), twice the same bits: %s: %s\n", loss, ln_v,
              loss == again ? "yes" : "no", loss_ok ? "ok" : "FAILED");
  ok = ok && loss_ok;

  gpt2::parameters<host> trained(c), retrained(c);
  std::copy(back.storage.data(), back.storage.data() + back.storage.size(), trained.storage.data());
  std::copy(back.storage.data(), back.storage.data() + back.storage.size(), retrained.storage.data());
  options ten = o;
  ten.steps = 10, ten.lr = 1e-3;
  const auto losses = train(trained, gpt2::shard_loader(token_file, B, T, c.vocab), ten, B, T);
  const bool falls = std::isfinite(losses.back()) && losses.front() == loss && losses.back() < losses.front() - 1.0f;
  const bool repeats = train(retrained, gpt2::shard_loader(token_file, B, T, c.vocab), ten, B, T) == losses &&
                       std::memcmp(trained.storage.data(), retrained.storage.data(), all_of(p).size_bytes()) == 0;
  std::printf("10 steps of AdamW (lr 1e-3) on the batch: loss %.4f -> %.4f: %s; run twice, the same bits: %s\n",
              losses.front(), losses.back(), falls ? "falling" : "NOT FALLING", repeats ? "yes" : "NO");
  ok = ok && falls && repeats;

  // The shard's batches in turn, cosine schedule, gradients clipped to norm 1.
  cosine.steps = 10, cosine.batches = "shard", cosine.clip = 1.0;
  gpt2::parameters<host> on_shard(c);
  std::copy(back.storage.data(), back.storage.data() + back.storage.size(), on_shard.storage.data());
  const auto shard_losses = train(on_shard, gpt2::shard_loader(shard_file, B, T, c.vocab), cosine, B, T);
  const bool shard_falls = std::isfinite(shard_losses.back()) && shard_losses.back() < shard_losses.front() - 0.5f;
  std::printf("10 steps over the shard's batches (cosine, clip 1): loss %.4f -> %.4f: %s\n", shard_losses.front(),
              shard_losses.back(), shard_falls ? "falling" : "NOT FALLING");
  ok = ok && shard_falls;
  std::filesystem::remove_all(dir);

  // Generation with the key/value cache against the forward pass over the
  // whole prefix: greedy tokens are its argmax; top-k tokens are among its
  // k largest logits, the same for a seed.
  const index_t P = 3, n = 6, k = 5;
  loom::host_tensor<std::int32_t, 2> prompt({2, P});
  for (index_t i = 0; i < 2 * P; ++i) prompt.data()[i] = static_cast<std::int32_t>(tokens[static_cast<std::size_t>(i)]);
  const auto greedy = gpt2::generate(trained, prompt, n), drawn = gpt2::generate(trained, prompt, n, k, 1.0, 7);
  const auto drawn_again = gpt2::generate(trained, prompt, n, k, 1.0, 7);
  bool greedy_ok = true, drawn_ok = std::equal(drawn.data(), drawn.data() + drawn.size(), drawn_again.data());
  for (index_t len = P; len < P + n; ++len) {
    for (const auto* seq : {&greedy, &drawn}) {
      gpt2::activations<host> a(c, 2, len);
      loom::host_tensor<std::int32_t, 2> inputs({2, len});
      for (index_t b = 0; b < 2; ++b)
        for (index_t i = 0; i < len; ++i) inputs(b, i) = (*seq)(b, i);
      gpt2::forward_logits(trained, a, inputs);
      for (index_t b = 0; b < 2; ++b) {
        const float* z = a.logits.data() + (b * len + len - 1) * c.vocab;
        const std::int32_t got = (*seq)(b, len);
        const auto above = std::count_if(z, z + c.vocab, [&](float x) { return x > z[got]; });
        if (seq == &greedy) greedy_ok = greedy_ok && std::max_element(z, z + c.vocab) - z == got;
        else drawn_ok = drawn_ok && above < k;
      }
    }
  }
  std::printf("generation with a key/value cache, 2 prompts of %lld tokens, %lld more: greedy equals the uncached "
              "forward's argmax: %s; top-%lld tokens among its %lld largest logits, repeatable: %s\n",
              static_cast<long long>(P), static_cast<long long>(n), greedy_ok ? "yes" : "NO",
              static_cast<long long>(k), static_cast<long long>(k), drawn_ok ? "yes" : "NO");
  ok = ok && greedy_ok && drawn_ok;
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
  const auto data = loader_for(o.tokens, o.batch, T, p.config);
  if (o.steps > 0) (void)train(p, data, o, o.batch, T, true);
  if (o.sample > 0) {
    const auto first = first_batch(data, o.batch, T);
    loom::host_tensor<std::int32_t, 2> prompt({1, o.prompt});
    for (index_t i = 0; i < o.prompt; ++i) prompt(0, i) = first.inputs.data()[i];
    const auto text = gpt2::generate(p, prompt, o.sample, o.top_k, o.temperature, o.seed);
    std::printf("tokens:");
    for (index_t i = 0; i < text.extent(1); ++i) std::printf(" %d", text(0, i));
    std::printf("\n");
  }
  if (o.steps > 0 || o.sample > 0) return 0;
  const auto b = first_batch(data, o.batch, T);
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
