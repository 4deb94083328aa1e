// `meshtrain generate`: prompts in, continuations out (stdout), timings and
// the KV cache size on stderr; in one process, or under mpirun on any layout
// (docs/MODEL.md, "Generation").
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/layout_command.h"
#include "comm/runtime.h"
#include "core/device.h"
#include "core/error.h"
#include "core/file.h"
#include "core/threads.h"
#include "cost/memory_estimate.h"
#include "data/tokenizer.h"
#include "infer/generate.h"
#include "mesh/mesh.h"
#include "ops/gemm.h"
#include "ops/kernels.h"
#include "train/model_io.h"
#include "train/run_mesh.h"
#include "train/train_model.h"

namespace mt {
namespace {

void check_args(const GenerateArgs& a) {
  MT_REQUIRE(a.output == "text" || a.output == "jsonl", ConfigError, "--output '", a.output,
             "' must be text or jsonl");
  MT_REQUIRE(a.batch_size >= 1, ConfigError, "--batch-size (", a.batch_size, ") must be at least 1");
  check_thread_count("--threads", a.threads);
  const cp::CpImpl impl = cp::parse_cp_impl(a.cp_impl);  // ConfigError naming the value
  MT_REQUIRE(
      impl == cp::CpImpl::ring || impl == cp::CpImpl::allgather, ConfigError, "--cp-impl ", a.cp_impl,
      ": generation attends to the KV cache's position shards by ring or allgather (infer/kv_attention.h); "
      "ulysses and hybrid are training's");
}

std::vector<std::string> read_prompts(const GenerateArgs& a) {
  std::vector<std::string> prompts = a.prompts;
  if (!a.prompts_file.empty()) {
    std::istringstream in(read_file(a.prompts_file, kMaxTextFile, "--prompts file"));
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r')
        line.pop_back();  // a CRLF file: the \r is no part of the prompt
      prompts.push_back(line);
    }
  }
  MT_REQUIRE(!prompts.empty(), ConfigError, "generate needs a prompt: --prompt TEXT or --prompts FILE");
  return prompts;
}

// What every layout needs before the model: the tokenizer, the options and
// the prompts, each checked (ConfigError naming the problem).
struct Job {
  Tokenizer tok;
  ModelConfig cfg;
  GenerateOptions o;
  std::vector<std::string> text;
  std::vector<std::vector<int32_t>> ids;
};

Job prepare_job(const GenerateArgs& a) {
  check_args(a);
  Job j{Tokenizer::load(a.tokenizer), read_model_config(a.model), {}, {}, {}};
  MT_REQUIRE(j.tok.vocab_size() == j.cfg.vocab_size, ConfigError, "the tokenizer ", a.tokenizer, " has ",
             j.tok.vocab_size(), " tokens but the model ", a.model, " has a vocabulary of ", j.cfg.vocab_size,
             ": they were not trained together");
  j.o.max_new_tokens = a.max_new_tokens;
  j.o.sampling = {a.temperature, a.top_k, a.top_p, static_cast<uint64_t>(a.seed)};
  j.o.prefill_chunk = a.prefill_chunk;
  j.o.eos_id = j.tok.eos_id();
  j.o.kv_dtype = parse_kv_dtype(a.kv_cache);
  check_generate_options(j.o);  // before the model loads or the streamed prompt is printed
  j.text = read_prompts(a);
  for (const std::string& t : j.text)
    j.ids.push_back(j.tok.encode(t));
  generation_capacity(j.cfg, j.ids, 0, j.o.max_new_tokens);  // every prompt fits the cache
  return j;
}

// The continuation's text as it reads after the prompt: sentencepiece drops
// the leading space of a sequence's first piece, so the continuation is
// decoded together with the prompt and the prompt's own text cut off.
std::string continuation_text(const Tokenizer& tok, std::vector<int32_t> prompt,
                              const std::vector<int32_t>& tokens) {
  const std::string before = tok.decode(prompt);
  prompt.insert(prompt.end(), tokens.begin(), tokens.end());
  const std::string all = tok.decode(prompt);
  return all.compare(0, before.size(), before) == 0 ? all.substr(before.size()) : tok.decode(tokens);
}

// Prompts [first, first + gens.size()) and their continuations on stdout.
void print_results(const Job& j, const std::vector<Generation>& gens, size_t first, const GenerateArgs& a) {
  for (size_t i = 0; i < gens.size(); ++i) {
    const Generation& g = gens[i];
    const std::string cont = continuation_text(j.tok, j.ids[first + i], g.tokens);
    if (a.output == "text") {
      std::printf("%s%s\n", j.text[first + i].c_str(), cont.c_str());
      continue;
    }
    nlohmann::ordered_json line = {{"index", static_cast<int64_t>(first + i)},
                                   {"prompt", j.text[first + i]},
                                   {"text", cont},
                                   {"tokens", g.tokens},
                                   {"stop", stop_name(g.stop)}};
    if (a.logprobs) line["logprobs"] = g.logprobs;
    std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
}

void print_stats(const std::string& who, size_t first, size_t end, const GenerateStats& st, KvDtype dtype,
                 int64_t head_dim) {
  std::fprintf(stderr,
               "generate: %sprompts %zu..%zu: kv cache %s %lld bytes, tracked %lld (%lld layers x %lld "
               "positions x %lld kv "
               "heads x %lld head_dim x %lld sequences; capacity %lld tokens); prefill %lld tokens %.3f s "
               "(%.1f tok/s); decode %lld tokens %.3f s (%.1f tok/s)\n",
               who.c_str(), first, end - 1, kv_dtype_name(dtype), static_cast<long long>(st.kv_cache_bytes),
               static_cast<long long>(st.kv_cache_tracked), static_cast<long long>(st.layers),
               static_cast<long long>(st.slots), static_cast<long long>(st.kv_heads),
               static_cast<long long>(head_dim), static_cast<long long>(st.batch),
               static_cast<long long>(st.capacity), static_cast<long long>(st.prefill_tokens), st.prefill_s,
               st.prefill_s > 0 ? static_cast<double>(st.prefill_tokens) / st.prefill_s : 0.0,
               static_cast<long long>(st.decode_tokens), st.decode_s,
               st.decode_s > 0 ? static_cast<double>(st.decode_tokens) / st.decode_s : 0.0);
  if (st.cp > 1)
    std::fprintf(stderr, "generate: %sprefill over cp %lld: %lld sends, %lld all-gathers\n", who.c_str(),
                 static_cast<long long>(st.cp), static_cast<long long>(st.prefill_cp_sends),
                 static_cast<long long>(st.prefill_cp_gathers));
}

// Under a device other than the host, the batch's crossings between it and the
// host, one line per label (docs/ARCHITECTURE.md "The kernel seam").
void print_crossings(const std::string& who, size_t first, size_t end) {
  if (run_allocator().device() == kHost) return;
  for (const auto& [label, n] : crossing_counts())
    std::fprintf(
        stderr,
        "generate: %sprompts %zu..%zu: crossings %s: to_host %lld %lld bytes, from_host %lld %lld bytes\n",
        who.c_str(), first, end - 1, label.c_str(), static_cast<long long>(n.to_host),
        static_cast<long long>(n.to_host_bytes), static_cast<long long>(n.from_host),
        static_cast<long long>(n.from_host_bytes));
}

// Prints what each new token adds to the decoded text of prompt 0 (one prompt, text output).
class Streamer {
 public:
  Streamer(const Job& j) : tok_(j.tok), ids_(j.ids[0]), shown_(j.tok.decode(ids_)) {
    std::fputs(j.text[0].c_str(), stdout);
  }
  void token(int32_t t) {
    ids_.push_back(t);
    const std::string now = tok_.decode(ids_);
    if (now.compare(0, shown_.size(), shown_) != 0) return;  // a multi-byte character is not complete yet
    std::fputs(now.substr(shown_.size()).c_str(), stdout);
    std::fflush(stdout);
    shown_ = now;
  }
  void finish() {
    const std::string all = tok_.decode(ids_);
    std::printf("%s\n", all.substr(std::min(shown_.size(), all.size())).c_str());
  }

 private:
  const Tokenizer& tok_;
  std::vector<int32_t> ids_;
  std::string shown_;
};

// Generates prompts [begin, end) batch by batch on this rank's model; every
// rank of a replica calls it alike. `who` prefixes the stderr lines; `stream`
// (may be null) gets prompt 0's tokens.
std::vector<Generation> run_prompts(const Job& j, Llama& model, size_t begin, size_t end,
                                    const GenerateArgs& a, const GenerateLayout& layout,
                                    const std::string& who, Streamer* stream) {
  std::vector<Generation> all;
  for (size_t first = begin; first < end; first += static_cast<size_t>(a.batch_size)) {
    const size_t stop = std::min(end, first + static_cast<size_t>(a.batch_size));
    const std::vector<std::vector<int32_t>> batch(j.ids.begin() + static_cast<std::ptrdiff_t>(first),
                                                  j.ids.begin() + static_cast<std::ptrdiff_t>(stop));
    GenerateStats st;
    reset_crossing_counts();  // the batch's own, the model's load before it left out
    auto on_token = [&](int64_t, int32_t t) { stream->token(t); };
    const std::vector<Generation> gens =
        generate(model, batch, static_cast<int64_t>(first), j.o, &st,
                 stream != nullptr ? std::function<void(int64_t, int32_t)>(on_token)
                                   : std::function<void(int64_t, int32_t)>(),
                 layout);
    print_stats(who, first, stop, st, j.o.kv_dtype, j.cfg.head_dim());
    print_crossings(who, first, stop);
    all.insert(all.end(), gens.begin(), gens.end());
  }
  return all;
}

int generate_in_one_process(const GenerateArgs& a) {
  const Job j = prepare_job(a);
  set_num_threads(a.threads > 0 ? static_cast<int>(a.threads) : hardware_threads());
  require_fits(estimate_eval_memory(j.cfg, 1, 1), 1, available_memory_bytes());
  for (size_t first = 0; first < j.ids.size(); first += static_cast<size_t>(a.batch_size)) {
    const size_t end = std::min(j.ids.size(), first + static_cast<size_t>(a.batch_size));
    const std::vector<std::vector<int32_t>> batch(j.ids.begin() + static_cast<std::ptrdiff_t>(first),
                                                  j.ids.begin() + static_cast<std::ptrdiff_t>(end));
    const int64_t cap = generation_capacity(j.cfg, batch, static_cast<int64_t>(first), j.o.max_new_tokens);
    const int64_t kv_bytes =
        generation_kv_bytes(j.cfg, {}, j.cfg.n_layers, static_cast<int64_t>(batch.size()), cap, j.o.kv_dtype);
    MT_REQUIRE(kv_bytes <= available_memory_bytes(), ConfigError, "the KV cache of prompts ", first, "..",
               end - 1, " needs ", kv_bytes, " bytes but ", available_memory_bytes(),
               " are available: lower --batch-size or --max-new-tokens, or use --kv-cache int8");
  }
  ModelOptions mo;  // one token of training buffers: generation sizes its own (model/llama_decode.cpp)
  mo.max_batch = 1;
  mo.max_seq = 1;
  Llama model(j.cfg, mo);
  load_model_dir(a.model, model);
  std::optional<Streamer> stream;
  if (a.output == "text" && j.text.size() == 1) stream.emplace(j);
  const std::vector<Generation> gens =
      run_prompts(j, model, 0, j.ids.size(), a, {}, "", stream ? &*stream : nullptr);
  if (stream) {
    stream->finish();
  } else {
    print_results(j, gens, 0, a);
  }
  return 0;
}

// The run's configuration: the model's and the layout flags. The training
// model's own activation buffers (one microbatch of 2·cp tokens) stay
// minimal: generation sizes its own (model/llama_decode.cpp).
// Generations as doubles: count, then per prompt its stop, token count, tokens, log-probs.
std::vector<double> pack(const std::vector<Generation>& gens) {
  std::vector<double> out{static_cast<double>(gens.size())};
  for (const Generation& g : gens) {
    out.push_back(g.stop == StopReason::eos ? 1.0 : 0.0);
    out.push_back(static_cast<double>(g.tokens.size()));
    out.insert(out.end(), g.tokens.begin(), g.tokens.end());
    out.insert(out.end(), g.logprobs.begin(), g.logprobs.end());
  }
  return out;
}

void unpack(const double* p, std::vector<Generation>& out) {
  const auto n = static_cast<size_t>(*p++);
  for (size_t i = 0; i < n; ++i) {
    Generation g;
    g.stop = *p++ == 1.0 ? StopReason::eos : StopReason::length;
    const auto k = static_cast<size_t>(*p++);
    for (size_t t = 0; t < k; ++t)
      g.tokens.push_back(static_cast<int32_t>(p[t]));
    g.logprobs.assign(p + k, p + 2 * k);
    p += 2 * k;
    out.push_back(std::move(g));
  }
}

// Every replica's generations on every rank, in world rank order (dp is the
// outermost axis, so that is prompt order); only `lead` ranks (one per
// replica) contribute theirs.
std::vector<Generation> gather_replicas(Group& world, const std::vector<Generation>& mine, bool lead) {
  std::vector<double> packed = lead ? pack(mine) : std::vector<double>{0.0};
  int64_t size = static_cast<int64_t>(packed.size());
  world.all_reduce(&size, 1, "generate output size", ReduceOp::max);
  packed.resize(static_cast<size_t>(size), 0.0);
  std::vector<double> all(static_cast<size_t>(size * world.size()));
  world.all_gather(packed.data(), all.data(), size, ElemType::f64, "generate output");
  std::vector<Generation> out;
  for (int r = 0; r < world.size(); ++r)
    unpack(all.data() + static_cast<int64_t>(r) * size, out);
  return out;
}

void generate_layout_body(const GenerateArgs& a, const Config& cfg, const Job& j, CommRuntime& runtime) {
  Group world = runtime.world();
  const RunMesh mesh = make_run_mesh(cfg, &world);
  TrainModel model = load_on_layout(cfg, a.model, a.threads, runtime.local_ranks(), mesh);
  const size_t P = j.ids.size(), d = static_cast<size_t>(mesh.dp_rank), dp = static_cast<size_t>(mesh.dp);
  const std::string who = "rank " + std::to_string(mesh.rank) + " (dp " + std::to_string(mesh.dp_rank) +
                          ", tp " + std::to_string(mesh.tp_rank) + ", pp " + std::to_string(mesh.pp_rank) +
                          ", cp " + std::to_string(mesh.cp_rank) + "): ";
  std::optional<Streamer> stream;
  if (world.rank() == 0 && a.output == "text" && P == 1) stream.emplace(j);
  const std::vector<Generation> mine =
      run_prompts(j, model.first(), P * d / dp, P * (d + 1) / dp, a,
                  {mesh.pp_group(), mesh.cp_group(), cfg.parsed().cp_impl}, who, stream ? &*stream : nullptr);
  const bool lead = mesh.tp_rank == 0 && mesh.pp_rank == 0 && mesh.cp_rank == 0;
  const std::vector<Generation> all = gather_replicas(world, mine, lead);
  if (world.rank() != 0) return;
  if (stream) {
    stream->finish();
  } else {
    print_results(j, all, 0, a);
  }
  std::fflush(stdout);
}

// Under mpirun: validation on every rank first (one message, every rank exits
// 1), then the model in the layout, each dp replica its block of prompts.
int generate_on_layout(const GenerateArgs& a, CommRuntime& runtime) {
  Group world = runtime.world();
  Config cfg;
  std::optional<Job> job;
  return run_on_every_rank(
      world,
      [&] {
        const ModelConfig model = read_model_config(a.model);
        // seq_len: any valid one (generation sizes its own buffers), 2 tokens per cp rank.
        cfg = layout_config(model, {a.dp, a.tp, a.pp, a.cp, a.cp_impl},
                            std::min<int64_t>(2 * a.cp, model.max_seq_len),
                            /*microbatch=*/1, world.size());
        job.emplace(prepare_job(a));
      },
      [&] { generate_layout_body(a, cfg, *job, runtime); });
}

}  // namespace

int run_generate_command(const GenerateArgs& a) {
  // Checked before MPI starts, so every rank refuses a bad name alike.
  const MatmulPrecisionGuard precision(parse_matmul_precision(a.precision, "--precision"));
  const RunDeviceGuard device(parse_run_device(a.device, "--device"));  // the kernel table and allocator
  CommRuntime runtime(nullptr, nullptr);  // a process started without mpirun is a world of one
  if (a.dp * a.tp * a.pp * a.cp > 1 || runtime.world().size() > 1) return generate_on_layout(a, runtime);
  return generate_in_one_process(a);
}

}  // namespace mt
