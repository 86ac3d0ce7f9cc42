// SPDX-License-Identifier: Apache-2.0
#pragma once
// llm.c's file formats, read and written on the host:
// - a checkpoint: 256 int32 (magic 20240326, version 3, maxT, V, L, NH, C,
//   padded V), then the 16 float32 parameter tensors in the order of
//   gpt2_config::tensor_shapes (wte padded to padded V rows);
// - a token shard: 256 int32 (magic 20240520, version 1, token count), then
//   the tokens as uint16.
// A file that does not fit throws loom::io_error naming the file and what is
// wrong. shard_loader reads a whole shard and hands out its batches in order.
#include <array>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <loom/loom.hpp>

namespace gpt2 {

inline constexpr std::int32_t checkpoint_magic = 20240326, checkpoint_version = 3;
inline constexpr std::int32_t shard_magic = 20240520, shard_version = 1;
inline constexpr int header_ints = 256, parameter_tensors = 16;

//! GPT-2's shape: maxT positions, V tokens (padded_vocab rows of the
//! embedding, V rounded up to a multiple of 128), L blocks, NH heads of C / NH channels.
struct gpt2_config {
  std::int64_t max_seq = 0, vocab = 0, layers = 0, heads = 0, channels = 0, padded_vocab = 0;

  static std::int64_t pad_vocab(std::int64_t v) { return (v + 127) / 128 * 128; }

  //! The element count of each parameter tensor, in the checkpoint's order:
  //! wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw,
  //! fcb, fcprojw, fcprojb, lnfw, lnfb.
  [[nodiscard]] std::array<std::int64_t, parameter_tensors> tensor_sizes() const {
    const std::int64_t C = channels, L = layers;
    return {padded_vocab * C, max_seq * C, L * C,     L * C,         L * 3 * C * C, L * 3 * C, L * C * C, L * C,
            L * C,            L * C,       L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C,     C,         C};
  }
  [[nodiscard]] std::int64_t parameter_count() const {
    std::int64_t n = 0;
    for (const auto s : tensor_sizes()) n += s;
    return n;
  }
};

namespace detail {
struct file_closer {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

inline file_ptr open(const std::string& path, const char* mode) {
  file_ptr f(std::fopen(path.c_str(), mode));
  if (!f) throw loom::io_error("loom: gpt2: cannot open " + path + (mode[0] == 'r' ? " for reading" : " for writing"));
  return f;
}
inline void read_exactly(std::FILE* f, void* dst, std::size_t bytes, const std::string& path, const char* what) {
  if (std::fread(dst, 1, bytes, f) != bytes)
    throw loom::io_error("loom: gpt2: " + path + " is truncated: it ends inside " + what + " (" +
                         std::to_string(bytes) + " bytes expected)");
}
inline void write_exactly(std::FILE* f, const void* src, std::size_t bytes, const std::string& path) {
  if (std::fwrite(src, 1, bytes, f) != bytes) throw loom::io_error("loom: gpt2: cannot write " + path);
}
inline std::array<std::int32_t, header_ints> read_header(std::FILE* f, const std::string& path, std::int32_t magic,
                                                         std::int32_t version, const char* kind) {
  std::array<std::int32_t, header_ints> h{};
  read_exactly(f, h.data(), sizeof h, path, "its 256-int32 header");
  if (h[0] != magic)
    throw loom::io_error("loom: gpt2: " + path + " is not an llm.c " + kind + ": magic " + std::to_string(h[0]) +
                         ", expected " + std::to_string(magic));
  if (h[1] != version)
    throw loom::io_error("loom: gpt2: " + path + ": " + kind + " version " + std::to_string(h[1]) +
                         " is not supported (expected " + std::to_string(version) + ")");
  return h;
}
}  // namespace detail

//! Reads an llm.c float32 checkpoint: its config, and every parameter into
//! `params` (resized to parameter_count(), the tensors back to back).
inline gpt2_config read_checkpoint(const std::string& path, std::vector<float>& params) {
  const auto f = detail::open(path, "rb");
  const auto h = detail::read_header(f.get(), path, checkpoint_magic, checkpoint_version, "checkpoint");
  gpt2_config c{h[2], h[3], h[4], h[5], h[6], h[7]};
  if (c.max_seq <= 0 || c.vocab <= 0 || c.layers <= 0 || c.heads <= 0 || c.channels <= 0 ||
      c.channels % c.heads != 0 || c.padded_vocab < c.vocab)
    throw loom::io_error("loom: gpt2: " + path + ": the header's shape is invalid (maxT " + std::to_string(c.max_seq) +
                         ", V " + std::to_string(c.vocab) + ", L " + std::to_string(c.layers) + ", NH " +
                         std::to_string(c.heads) + ", C " + std::to_string(c.channels) + ", padded V " +
                         std::to_string(c.padded_vocab) + ")");
  params.resize(static_cast<std::size_t>(c.parameter_count()));
  detail::read_exactly(f.get(), params.data(), params.size() * sizeof(float), path, "its parameters");
  return c;
}

//! Writes `params` (parameter_count() floats) as an llm.c float32 checkpoint.
inline void write_checkpoint(const std::string& path, const gpt2_config& c, std::span<const float> params) {
  if (static_cast<std::int64_t>(params.size()) != c.parameter_count())
    throw loom::shape_error("loom: gpt2: " + std::to_string(params.size()) + " parameters for a model of " +
                            std::to_string(c.parameter_count()));
  std::array<std::int32_t, header_ints> h{};
  const std::int64_t fields[] = {checkpoint_magic, checkpoint_version, c.max_seq, c.vocab,
                                 c.layers,         c.heads,            c.channels, c.padded_vocab};
  for (std::size_t i = 0; i != std::size(fields); ++i) h[i] = static_cast<std::int32_t>(fields[i]);
  const auto f = detail::open(path, "wb");
  detail::write_exactly(f.get(), h.data(), sizeof h, path);
  detail::write_exactly(f.get(), params.data(), params.size() * sizeof(float), path);
}

//! Reads an llm.c token shard (uint16 tokens).
inline std::vector<std::uint16_t> read_tokens(const std::string& path) {
  const auto f = detail::open(path, "rb");
  const auto h = detail::read_header(f.get(), path, shard_magic, shard_version, "token shard");
  if (h[2] < 0) throw loom::io_error("loom: gpt2: " + path + ": negative token count " + std::to_string(h[2]));
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(h[2]));
  detail::read_exactly(f.get(), tokens.data(), tokens.size() * sizeof(std::uint16_t), path, "its tokens");
  return tokens;
}

//! Writes tokens as an llm.c token shard.
inline void write_tokens(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  std::array<std::int32_t, header_ints> h{};
  h[0] = shard_magic, h[1] = shard_version, h[2] = static_cast<std::int32_t>(tokens.size());
  const auto f = detail::open(path, "wb");
  detail::write_exactly(f.get(), h.data(), sizeof h, path);
  detail::write_exactly(f.get(), tokens.data(), tokens.size() * sizeof(std::uint16_t), path);
}

//! Batches of B sequences of T tokens from a whole token shard, in order:
//! each batch's inputs are the next B T tokens, its targets the same shifted
//! by one; a batch that would pass the shard's end starts again at token 0.
//! The shard is read whole at construction; a shard shorter than one batch
//! (B T + 1 tokens) or holding a token outside the vocabulary throws
//! loom::io_error naming the file.
class shard_loader {
 public:
  shard_loader(const std::string& path, std::int64_t batch, std::int64_t seq, std::int64_t vocab)
      : tokens_(read_tokens(path)), batch_(batch), seq_(seq) {
    if (batch <= 0 || seq <= 0)
      throw loom::value_error("loom: gpt2: a batch of " + std::to_string(batch) + " x " + std::to_string(seq) +
                              " tokens is empty");
    if (static_cast<std::int64_t>(tokens_.size()) < batch * seq + 1)
      throw loom::io_error("loom: gpt2: " + path + " holds " + std::to_string(tokens_.size()) +
                           " tokens; a batch of " + std::to_string(batch) + " x " + std::to_string(seq) + " needs " +
                           std::to_string(batch * seq + 1));
    for (std::size_t i = 0; i != tokens_.size(); ++i)
      if (tokens_[i] >= vocab)
        throw loom::io_error("loom: gpt2: " + path + ": token " + std::to_string(tokens_[i]) + " at " +
                             std::to_string(i) + " is outside the vocabulary of " + std::to_string(vocab));
  }

  //! Writes the next batch's inputs and targets (B T each, row-major [B, T]).
  void next(std::int32_t* inputs, std::int64_t* targets) {
    const std::size_t n = static_cast<std::size_t>(batch_ * seq_);
    if (position_ + n + 1 > tokens_.size()) position_ = 0;
    for (std::size_t i = 0; i != n; ++i) {
      inputs[i] = tokens_[position_ + i];
      targets[i] = tokens_[position_ + i + 1];
    }
    position_ += n;
  }
  //! The first token of the next batch, and the shard's length.
  [[nodiscard]] std::size_t position() const { return position_; }
  [[nodiscard]] std::size_t size() const { return tokens_.size(); }

 private:
  std::vector<std::uint16_t> tokens_;
  std::int64_t batch_, seq_;
  std::size_t position_ = 0;
};

}  // namespace gpt2
