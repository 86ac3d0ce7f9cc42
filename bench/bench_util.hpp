// SPDX-License-Identifier: Apache-2.0
// Shared by loom's CPU and GPU benchmark programs: command-line options,
// medians, random never-zero data, and the one-JSON-object-per-line output
// that bench/report.py turns into tables and plots. Not part of the library.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace loom_bench {

//! What every benchmark program accepts: `--quick` (tiny sizes, one run, for
//! CI smoke runs), `--json FILE` (append one JSON object per measurement) and
//! `--self-test` (GPU programs: check the references and tolerances against
//! the host executor, without a GPU, and time nothing).
struct options {
  bool quick = false;
  bool self_test = false;
  std::string json_path;

  static options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--quick") == 0) {
        o.quick = true;
      } else if (std::strcmp(argv[i], "--self-test") == 0) {
        o.self_test = true;
      } else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
        o.json_path = argv[++i];
      } else {
        std::fprintf(stderr, "usage: %s [--quick] [--self-test] [--json FILE]\n", argv[0]);
        std::exit(2);
      }
    }
    return o;
  }
};

//! The median of the samples (the upper one of the middle two).
inline double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t.empty() ? 0.0 : t[t.size() / 2];
}

//! Wall time of f in milliseconds: the median of `runs` calls after `warmup`.
template <class F>
double median_ms(int warmup, int runs, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f();
    const auto b = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  return median(ms);
}

//! A random value in +-[0.25, 2): random sign, never zero, so a kernel that
//! skips or zeroes elements cannot match the reference by accident.
inline float nonzero_value(std::mt19937_64& g) {
  std::uniform_real_distribution<float> d(0.25f, 2.0f);
  const float v = d(g);
  return (g() & 1) ? v : -v;
}

//! One measurement. `bytes` is what must move (inputs read once, outputs
//! written once), so GB/s compares implementations on the same work.
struct record {
  std::string bench, op, shape, dtype, impl;
  double ms = 0;
  double bytes = 0;
  double copy_gbps = 0;      //!< the copy bandwidth measured in the same run; 0 when none
  std::string check = "ok";  //!< outcome of the comparison with the reference
  int threads = 0;           //!< host threads; 0 for the GPU
};

inline double gbps(const record& r) { return r.ms > 0 ? r.bytes / (r.ms * 1e6) : 0.0; }

//! `path` opened for appending; exits with a message when it cannot be.
inline std::FILE* open_for_append(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) {
    std::fprintf(stderr, "cannot append to %s\n", path.c_str());
    std::exit(2);
  }
  return f;
}

//! Writes `r` as one JSON line to `path` (appending) when a path was given.
inline void emit_json(const std::string& path, const record& r) {
  if (path.empty()) return;
  std::FILE* f = open_for_append(path);
  std::fprintf(f,
               "{\"bench\": \"%s\", \"op\": \"%s\", \"shape\": \"%s\", \"dtype\": \"%s\", \"impl\": \"%s\", "
               "\"ms\": %.6g, \"bytes\": %.0f, \"gbps\": %.6g, \"copy_gbps\": %.6g, \"pct_copy\": %.4g, "
               "\"check\": \"%s\", \"threads\": %d}\n",
               r.bench.c_str(), r.op.c_str(), r.shape.c_str(), r.dtype.c_str(), r.impl.c_str(), r.ms, r.bytes, gbps(r),
               r.copy_gbps, r.copy_gbps > 0 ? 100.0 * gbps(r) / r.copy_gbps : 0.0, r.check.c_str(), r.threads);
  std::fclose(f);
}

//! The machine and the build a run measured: CPU model, logical cores, the
//! vector ISA extensions the CPU offers, the widest the program was compiled for,
//! the compiler and its flags. Figures from different machines or flags are
//! not comparable, so every report carries this.
struct machine {
  std::string cpu = "unknown";
  int cores = 0;
  std::string isa;       //!< offered by the CPU (/proc/cpuinfo flags)
  std::string compiled;  //!< the widest one the compiler targeted (its predefined macros)
  std::string compiler;
  std::string flags;
};

//! The widest vector extension the compiler was told it may use.
inline const char* compiled_isa() {
#if defined(__AVX512F__)
  return "avx512f";
#elif defined(__AVX2__)
  return "avx2";
#elif defined(__AVX__)
  return "avx";
#elif defined(__SSE4_2__)
  return "sse4.2";
#elif defined(__x86_64__)
  return "sse2 (x86-64 baseline)";
#elif defined(__aarch64__)
  return "neon (aarch64)";
#else
  return "unknown";
#endif
}

//! Reads the machine's description (Linux: /proc/cpuinfo); `flags` is what
//! the build passed to the compiler.
inline machine describe_machine(const std::string& flags) {
  machine m;
  m.cores = static_cast<int>(std::thread::hardware_concurrency());
  m.compiled = compiled_isa();
#if defined(__clang__)
  m.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  m.compiler = "g++ " __VERSION__;
#endif
  m.flags = flags;
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  static const char* const wanted[] = {"sse4_2",   "avx",      "avx2",     "fma",         "f16c",
                                       "avx512f",  "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16",
                                       "amx_tile", "asimd",    "sve",      "sve2"};
  bool have_model = false, have_flags = false;
  while (std::getline(f, line) && !(have_model && have_flags)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (!have_model && (key == "model name" || key == "Model")) {
      m.cpu = value;
      have_model = true;
    } else if (!have_flags && (key == "flags" || key == "Features")) {
      std::istringstream in(value);
      std::vector<std::string> present;
      for (std::string w; in >> w;) present.push_back(w);
      for (const char* w : wanted) {
        if (std::find(present.begin(), present.end(), w) == present.end()) continue;
        if (!m.isa.empty()) m.isa += ' ';
        m.isa += w;
      }
      have_flags = true;
    }
  }
  return m;
}

//! `s` with the characters JSON needs escaped escaped.
inline std::string json_escape(const std::string& s) {
  std::string o;
  for (const char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o;
}

//! Writes the machine as one JSON line (`"bench": "machine"`) to `path`
//! when a path was given, and prints it.
inline void emit_machine(const std::string& path, const machine& m, int threads) {
  std::printf("machine: %s, %d logical cores, %d threads; CPU ISA: %s; compiled for: %s; compiler: %s; flags: %s\n",
              m.cpu.c_str(), m.cores, threads, m.isa.c_str(), m.compiled.c_str(), m.compiler.c_str(), m.flags.c_str());
  if (path.empty()) return;
  std::FILE* f = open_for_append(path);
  std::fprintf(f,
               "{\"bench\": \"machine\", \"cpu\": \"%s\", \"cores\": %d, \"threads\": %d, \"isa\": \"%s\", "
               "\"compiled_for\": \"%s\", \"compiler\": \"%s\", \"flags\": \"%s\"}\n",
               json_escape(m.cpu).c_str(), m.cores, threads, json_escape(m.isa).c_str(),
               json_escape(m.compiled).c_str(), json_escape(m.compiler).c_str(), json_escape(m.flags).c_str());
  std::fclose(f);
}

//! Prints the human table's header and rows (same columns for all programs).
inline void print_header() {
  std::printf("%-26s %-12s %-5s %-22s %10s %9s %7s  %s\n", "op", "shape", "dtype", "impl", "ms", "GB/s", "%copy",
              "check");
}
inline void print_row(const record& r) {
  char pct[16] = "-";
  if (r.copy_gbps > 0) std::snprintf(pct, sizeof pct, "%.1f", 100.0 * gbps(r) / r.copy_gbps);
  std::printf("%-26s %-12s %-5s %-22s %10.4f %9.2f %7s  %s\n", r.op.c_str(), r.shape.c_str(), r.dtype.c_str(),
              r.impl.c_str(), r.ms, gbps(r), pct, r.check.c_str());
  std::fflush(stdout);
}

//! Finishes a checked measurement: `rec` holds the verdict of the run the
//! caller checked; this times `f` (median of `runs` after `warmup`), prints
//! the row, appends it to `json_path`, and sets `failed` when the check
//! failed. Returns the median ms.
template <class F>
double report_timed(record& rec, int warmup, int runs, F&& f, const std::string& json_path, bool& failed) {
  failed = failed || rec.check != "ok";
  rec.ms = median_ms(warmup, runs, f);
  print_row(rec);
  emit_json(json_path, rec);
  return rec.ms;
}

//! Worst |got - ref| / (atol + rtol |ref|) over the samples: <= 1 passes.
struct error_meter {
  double atol, rtol, worst = 0;
  void add(double got, double ref) {
    const double e = std::isnan(got) != std::isnan(ref) ? 1e30 : std::fabs(got - ref) / (atol + rtol * std::fabs(ref));
    worst = std::max(worst, std::isnan(e) ? 0.0 : e);
  }
  std::string verdict() const {
    if (worst <= 1) return "ok";
    char buf[64];
    std::snprintf(buf, sizeof buf, "FAIL (error %.3g x tolerance)", worst);
    return buf;
  }
};
}  // namespace loom_bench
