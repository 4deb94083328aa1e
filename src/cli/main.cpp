// meshtrain: the command line. Each subcommand parses its options, then calls
// into the libraries; every mt::Error becomes a one-line message and exit 1.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "config/config.h"
#include "core/error.h"
#include "train/compare.h"
#include "train/fingerprint.h"
#include "train/preempt.h"

namespace {

CLI::App* add_train(CLI::App& app, mt::TrainArgs& train) {
  CLI::App* tr = app.add_subcommand("train", "Train a model (one process, or dp ranks under mpirun)");
  tr->add_option("--config", train.config, "TOML config file (configs/demo.toml, configs/bench.toml)");
  tr->add_option("--set", train.overrides, "Override a config key: --set section.key=value (repeatable)")
      ->take_all();
  tr->add_option("--metrics", train.run.metrics_path, "Write one JSON object per step to this file");
  tr->add_option("--save", train.run.save_dir, "Write a Hugging Face model directory here at the end");
  tr->add_option("--init-from", train.run.init_from,
                 "Start from this model directory, or from the weights of a checkpoint directory (fresh "
                 "optimizer, step 0), saved under any layout");
  tr->add_option(
      "--resume", train.run.resume,
      "Continue from a checkpoint: 'auto' (the newest intact one in train.checkpoint_dir, passing "
      "over damaged ones with a warning, or start fresh if none) or a step-N folder; saved under any "
      "layout (parallel.* and the world size may differ)");
  tr->add_option("--dp", train.dp, "Shorthand for --set parallel.dp=N");
  tr->add_option("--tp", train.tp, "Shorthand for --set parallel.tp=N");
  tr->add_option("--pp", train.pp, "Shorthand for --set parallel.pp=N");
  tr->add_option("--cp", train.cp, "Shorthand for --set parallel.cp=N");
  tr->add_option("--zero", train.zero, "Shorthand for --set parallel.zero=S");
  tr->add_flag("--print-mesh", train.print_mesh,
               "Print the rank map of the device mesh (docs/PARALLELISM.md, \"The device mesh\")");
  tr->add_option("--placement", train.placement,
                 "Which process takes which mesh position: 'nodes' (default: node by node as MPI reports "
                 "the nodes, tp first, so a TP group stays inside one), 'nodes:AXES' (those mesh axes first, "
                 "e.g. nodes:cp keeps cp's all-to-all inside a node and sends TP across; nodes:cp+dp) or "
                 "'ranks' (mpirun's rank order as given, e.g. by --map-by) (docs/CLUSTER.md)");
  tr->add_flag("--explain", train.run.explain,
               "Print rank 0's linear plan (each linear site's collectives) and every collective of the "
               "first step, rank by rank: axis, op, tensor shape, elements, call site (docs/PARALLELISM.md, "
               "\"--explain\")");
  tr->add_flag("--explain-memory", train.run.explain_memory,
               "At the end, print every rank's memory model (bytes per kind, and its bound) beside the "
               "peaks measured in the last step, \"ok\" or \"OUTSIDE\" per row (docs/PARALLELISM.md, "
               "\"Memory per rank\")");
  tr->add_option("--trace", train.run.trace_path,
                 "Write the traced steps of every rank as one Chrome-trace JSON file (open in Perfetto): "
                 "per layer forward/backward, each collective and transfer (axis, op, bytes; in flight and "
                 "waited), pipeline idle, optimizer, checkpoint writes, memory by kind (docs/FORMATS.md)");
  tr->add_option("--trace-steps", train.run.trace_steps,
                 "The steps --trace records: 3, 2-4, 2,5 (counted from 0; default: the last step)");
  tr->add_option("--fingerprint", train.run.fingerprint_path,
                 "Write a checksum and float64 sums of every activation, activation gradient and parameter "
                 "gradient, per step, layer and sequence, at layout-free coordinates (docs/FINGERPRINT.md); "
                 "compare two runs' files with meshtrain compare A B");
  tr->add_flag("--profile", train.run.profile, "Print the share of time per kernel at the end");
  tr->add_flag("--quiet", train.run.quiet, "No per-step log lines");
  tr->footer(
      "Config keys ([section] key = default  type: meaning):\n\n" + mt::config_help() +
      "\nA key you set (in the file or by --set) that has no effect in the chosen layout is named once on\n"
      "stderr, e.g. \"meshtrain: note: parallel.bucket_mb has no effect with parallel.zero = 3\".\n");
  return tr;
}

CLI::App* add_prepare(CLI::App& app, mt::PrepareArgs& prep) {
  CLI::App* pr = app.add_subcommand("prepare", "Train a BPE tokenizer on text and write token files");
  pr->add_option("--text", prep.text, "Text files or folders (default: Debian's fortunes)")->take_all();
  pr->add_option("--out", prep.out, "Output folder: tokenizer.model, train.bin, val.bin")->required();
  pr->add_option("--vocab-size", prep.vocab_size, "Vocabulary size")->capture_default_str();
  return pr;
}

// eval's and generate's --precision, the matmul rule of train.precision (docs/MODEL.md "Precision").
void add_precision(CLI::App& cmd, std::string& precision) {
  cmd.add_option(
         "--precision", precision,
         "Matrix products: fp32 | bf16 (operands rounded to bf16, fp32 accumulation; as train.precision)")
      ->capture_default_str();
}

CLI::App* add_eval(CLI::App& app, mt::EvalArgs& ev) {
  CLI::App* e = app.add_subcommand("eval", "Mean next-token loss of a model over a token file");
  e->add_option("--model", ev.model, "Model directory (config.json, model.safetensors)")->required();
  e->add_option("--data", ev.data, "Token file (.bin)")->required();
  e->add_option("--seq-len", ev.seq_len, "Window length (default: the model's max_seq_len)");
  e->add_option("--max-windows", ev.max_windows, "Evaluate at most this many windows (0: all)");
  e->add_option("--threads", ev.threads,
                "Threads (0: all cores; under mpirun: cores / local ranks; at most 4 x the cores)");
  e->add_option("--dp", ev.dp, "Data-parallel replicas under mpirun (each evaluates every window)");
  e->add_option("--tp", ev.tp, "Tensor-parallel ranks under mpirun");
  e->add_option("--pp", ev.pp, "Pipeline stages under mpirun");
  e->add_option("--cp", ev.cp, "Context-parallel ranks under mpirun (seq-len divisible by 2 x cp)");
  add_precision(*e, ev.precision);
  e->add_option(
      "--position-buckets", ev.position_buckets,
      "Also print the mean loss in N equal buckets of window positions (one process; N divides seq-len)");
  e->footer(
      "Under mpirun the ranks must multiply to dp x tp x pp x cp; the model is loaded into that layout as\n"
      "--init-from does and evaluated as a training run's validation, windows 4 at a time.\n"
      "--position-buckets N prints, after the loss, one line per bucket of seq-len / N positions:\n"
      "'bucket FIRST LAST TOKENS MEAN_LOSS' (positions counted from 0 at each window's start).\n");
  return e;
}

CLI::App* add_generate(CLI::App& app, mt::GenerateArgs& g) {
  CLI::App* s = app.add_subcommand(
      "generate", "Continue prompts with a model: prefill, then one token at a time from a KV cache");
  s->add_option("--model", g.model, "Model directory")->required();
  s->add_option("--tokenizer", g.tokenizer, "tokenizer.model written by prepare")->required();
  s->add_option("--prompt", g.prompts, "Prompt text (repeatable; prompts are numbered in order)");
  s->add_option("--prompts", g.prompts_file, "File with one prompt per line (after any --prompt)");
  s->add_option("--max-new-tokens", g.max_new_tokens, "Tokens to generate per prompt at most")
      ->capture_default_str();
  s->add_option("--temperature", g.temperature, "0: greedy; > 0: sample from softmax(logits / T)")
      ->capture_default_str();
  s->add_option("--top-k", g.top_k, "Sample among the k most likely tokens (0: all)")->capture_default_str();
  s->add_option("--top-p", g.top_p, "Sample among the most likely tokens reaching this mass, in (0, 1]")
      ->capture_default_str();
  s->add_option("--seed", g.seed, "Sampling seed; each draw is keyed by (seed, prompt index, position)")
      ->capture_default_str();
  s->add_option("--output", g.output,
                "text: each prompt followed by its continuation (streamed for one prompt); jsonl: one object "
                "per prompt {index, prompt, text, tokens, stop}")
      ->capture_default_str();
  s->add_flag("--logprobs", g.logprobs, "jsonl: add each token's log-probability under the model");
  s->add_option("--prefill-chunk", g.prefill_chunk, "Prefill prompts this many tokens at a time (0: whole)")
      ->capture_default_str();
  s->add_option("--batch-size", g.batch_size, "Prompts generated together (one KV cache)")
      ->capture_default_str();
  s->add_option("--kv-cache", g.kv_cache, "KV cache element type: f32 | int8 (per token and head scales)")
      ->capture_default_str();
  s->add_option("--threads", g.threads,
                "Threads (0: all cores; under mpirun: cores / local ranks; at most 4 x the cores)");
  add_precision(*s, g.precision);
  s->add_option("--device", g.device,
                "The kernel table and memory, as train.device: cpu | fake (for tests: device memory behind "
                "faulting pointers, docs/ARCHITECTURE.md \"The kernel seam\")")
      ->capture_default_str();
  s->add_option("--dp", g.dp, "Data-parallel replicas under mpirun (prompts split in contiguous blocks)");
  s->add_option("--tp", g.tp, "Tensor-parallel ranks under mpirun (each caches its kv heads)");
  s->add_option("--pp", g.pp, "Pipeline stages under mpirun");
  s->add_option("--cp", g.cp, "Context-parallel ranks under mpirun (the KV cache sharded by position)");
  s->add_option("--cp-impl", g.cp_impl,
                "The prefill's attention under cp (parallel.cp_impl): ring (k|v passed rank to rank) | "
                "allgather (q|k|v all-gathered)")
      ->capture_default_str();
  s->footer(
      "stdout carries only the continuations; timings and the KV cache size go to stderr.\n"
      "Under mpirun the ranks must multiply to dp x tp x pp x cp; the model is loaded into that layout as\n"
      "--init-from does, and every layout continues each prompt as one process does (the vocab-parallel\n"
      "head samples without gathering the logits). Each rank reports its KV cache bytes on stderr. Pipeline\n"
      "stages run prompt groups in flight together; cp shards the cache by position and each step's rows\n"
      "in blocks (the prefill's attention by a ring of k|v, or by all-gathering q|k|v: --cp-impl).");
  return s;
}

CLI::App* add_compare(CLI::App& app, mt::CompareOptions& cmp) {
  CLI::App* c =
      app.add_subcommand("compare",
                         "Compare two runs: per-step losses and gradient norms, and optionally two model "
                         "directories; or two train --fingerprint files (docs/FINGERPRINT.md)");
  c->add_option("metrics_a", cmp.metrics_a, "Metrics file (JSON lines) of run A")->required();
  c->add_option("metrics_b", cmp.metrics_b, "Metrics file of run B (the reference)")->required();
  c->add_option("--model-a", cmp.model_a, "Model directory of run A");
  c->add_option("--model-b", cmp.model_b, "Model directory of run B");
  c->add_option("--rtol", cmp.rtol, "Relative tolerance (fingerprints: 0 asks for bitwise equality)")
      ->capture_default_str();
  c->add_option("--grad-norm-rtol", cmp.grad_norm_rtol,
                "Relative tolerance of the per-step grad_norm (default: --rtol)");
  c->add_option("--tensor-rtol", cmp.tensor_rtol,
                "Relative tolerance of each tensor's L2 distance (default: --rtol)");
  c->footer(
      "Two fingerprint files (train --fingerprint) are compared tensor by tensor: the first step, layer,\n"
      "tensor and sequences whose checksum differs, the first whose float64 sums differ beyond their bound\n"
      "(exit 1), and the ranks that held the pieces that differ (docs/FINGERPRINT.md).");
  return c;
}

CLI::App* add_export(CLI::App& app, mt::ExportArgs& ex) {
  CLI::App* x = app.add_subcommand(
      "export",
      "Write a training checkpoint's model as the Hugging Face directory --save writes (one process)");
  x->add_option("--checkpoint", ex.checkpoint, "Checkpoint directory (a step-N folder with metadata.json)")
      ->required();
  x->add_option("--out", ex.out, "Model directory to write (config.json, model.safetensors)")->required();
  x->footer(
      "Each tensor is assembled from the checkpoint's slices, whatever layout saved them; every slice's\n"
      "checksums are verified first. The result equals --save of the same run at the same step, byte\n"
      "for byte, and loads with --init-from, eval, generate, or transformers' from_pretrained.\n");
  return x;
}

CLI::App* add_schedule(CLI::App& app, mt::ScheduleArgs& sch) {
  CLI::App* sc = app.add_subcommand(
      "schedule",
      "Draw a pipeline schedule as a time x rank grid, with each rank's bubble and activation memory");
  sc->add_option("--kind", sch.kind, "gpipe | 1f1b | interleaved | zbh1")->required();
  sc->add_option("--pp", sch.pp, "Pipeline ranks")->required();
  sc->add_option("--microbatches", sch.microbatches, "Microbatches per step")->required();
  sc->add_option("--v", sch.v, "Model chunks per rank (interleaved: at least 2)")->capture_default_str();
  sc->footer(
      "Simulated with each forward of a stage (or chunk) taking 1 time unit, each backward 2,\n"
      "communication free. Cells: F3 / B3 = forward / backward of microbatch 3 (interleaved: F3a on\n"
      "chunk 0, F3b on chunk 1, ...), repeated over every time unit they take; . = idle.\n"
      "Bubble = idle / makespan, beside the ideal (pp-1)/(v*m+pp-1). Activation sets in flight =\n"
      "(microbatch, chunk) pairs forwarded and not yet backwarded on the rank: its activation memory.");
  return sc;
}

CLI::App* add_plan(CLI::App& app, mt::PlanArgs& pl) {
  CLI::App* p = app.add_subcommand(
      "plan", "Rank the layouts of a model on a machine by predicted step time (docs/PLANNER.md)");
  p->add_option("--config", pl.config, "TOML config: its [model] (and train.seq_len)")->required();
  p->add_option(
       "--machine", pl.machine,
       "Built-in profile (a100-8x-ib, h100-8x-ib, h200-8x-ib, ascend910b-8x) or a file from calibrate")
      ->required();
  p->add_option("--devices", pl.devices, "Devices (ranks) in the job")->required();
  p->add_option("--global-batch", pl.global_batch, "Sequences per step")->required();
  p->add_option("--seq-len", pl.seq_len, "Tokens per sequence (default: the config's train.seq_len)");
  p->add_option(
      "--layout", pl.layout,
      "Fix fields: 'dp2,tp1,pp1,cp1,ep1,zero1,mbs4,v1,sp,recompute=none,shard2' (cp's attention: ring, "
      "ulysses or hybridN; the dp all-reduce: hier or nohier; the schedule: zbh1 or nozb; the node order: "
      "inner=cp, inner=cp+dp, ...); with dp, tp, pp, "
      "cp, zero and mbs all given, predict that one layout");
  p->add_option("--top", pl.top, "Layouts to print in detail")->capture_default_str();
  p->add_option("--scaling", pl.scaling, "Device counts of a strong and weak scaling table: 8,16,32")
      ->delimiter(',');
  p->add_option("--attention", pl.attention,
                "flash (scores never stored) | materialized (as Megatron-LM in 2021)")
      ->capture_default_str();
  p->add_option("--grad-overlap", pl.grad_overlap,
                "backward (the gradient reduction runs behind the backward) | none (after it, as Megatron-LM "
                "in 2021)")
      ->capture_default_str();
  p->add_option("--json", pl.json_out, "Also write the result as JSON (docs/FORMATS.md, \"Plan output\")");
  return p;
}

CLI::App* add_calibrate(CLI::App& app, mt::CalibrateArgs& ca) {
  CLI::App* c = app.add_subcommand(
      "calibrate",
      "Measure this machine (GEMM rates, memory rate, collectives under mpirun) for plan --machine");
  c->add_option("--out", ca.out, "Machine description to write (JSON, docs/FORMATS.md)")->required();
  c->add_option(
      "--config", ca.config,
      "Also measure this config's layer GEMMs as a step runs them (tp 1 and 2; a microbatch's rows and "
      "half of them), its layer kernels and its optimizer pass");
  c->add_option("--seconds", ca.seconds, "Seconds per measured shape or size")->capture_default_str();
  c->footer(
      "Run under mpirun -np 2 (or 4) to fit each collective's latency and bandwidth for 2 (and 4) ranks; the "
      "compute rates are measured for 1, 2, 4, ... ranks on the node, each with cores / ranks threads. Use "
      "the binding the training runs use (Open MPI binds each of at most 2 ranks to one core: --bind-to none "
      "lets a lone rank use the node).");
  return c;
}

CLI::App* add_report(CLI::App& app, mt::ReportArgs& rep) {
  CLI::App* r = app.add_subcommand(
      "report", "Draw metrics files as one self-contained HTML page of charts (opens offline)");
  r->add_option("runs", rep.runs, "Metrics files (train --metrics), overlaid for comparison");
  r->add_option("--plan", rep.plans,
                "A plan --scaling … --json FILE: draw its strong and weak scaling (repeatable)");
  r->add_option("--out", rep.out, "The HTML page to write")->capture_default_str();
  r->add_option("--vega", rep.vega,
                "Vega, inlined into the page: the folder of Debian's libjs-vega modules, or a one-file "
                "vega.min.js")
      ->capture_default_str();
  r->footer(
      "Charts: training and validation loss, the step time split per rank (compute, exposed communication\n"
      "by axis, pipeline bubble, optimizer), step time, bytes per axis per step, memory by kind per rank\n"
      "against the analytic model, and when the runs have them the pipeline bubble against theory and the\n"
      "expert load (docs/FORMATS.md \"Metrics file\"); with --plan, the planner's strong and weak scaling.");
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  // First: a SIGTERM or SIGUSR1 from here on stops a run with checkpoints after its first step, however early
  // it comes (train/preempt.h); every other process gets the default back below, the signal then re-raised.
  mt::install_stop_handlers();
  CLI::App app{"meshtrain: train decoder-only Transformer language models, exactly, on many processes"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show the help of every subcommand");
  mt::TrainArgs train;
  mt::PrepareArgs prep;
  mt::EvalArgs ev;
  mt::GenerateArgs ga;
  mt::CompareOptions cmp;
  mt::ScheduleArgs sch;
  mt::ExportArgs ex;
  mt::PlanArgs pl;
  mt::CalibrateArgs ca;
  mt::ReportArgs rep;
  const CLI::App* tr = add_train(app, train);
  const CLI::App* pr = add_prepare(app, prep);
  const CLI::App* e = add_eval(app, ev);
  const CLI::App* g = add_generate(app, ga);
  const CLI::App* c = add_compare(app, cmp);
  const CLI::App* sc = add_schedule(app, sch);
  const CLI::App* x = add_export(app, ex);
  const CLI::App* pla = add_plan(app, pl);
  const CLI::App* cal = add_calibrate(app, ca);
  const CLI::App* rp = add_report(app, rep);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    mt::release_stop_handlers();
    return app.exit(err);
  }
  try {
    if (!*tr) mt::release_stop_handlers();
    if (*tr) return mt::run_train_command(train);
    if (*pr) return mt::run_prepare_command(prep);
    if (*e) return mt::run_eval_command(ev);
    if (*g) return mt::run_generate_command(ga);
    if (*sc) return mt::run_schedule_command(sch);
    if (*x) return mt::run_export_command(ex);
    if (*pla) return mt::run_plan_command(pl);
    if (*cal) return mt::run_calibrate_command(ca);
    if (*rp) return mt::run_report_command(rep);
    if (*c && mt::is_fingerprint_file(cmp.metrics_a) && mt::is_fingerprint_file(cmp.metrics_b)) {
      const mt::FingerprintCompare r = mt::compare_fingerprints(cmp.metrics_a, cmp.metrics_b, cmp.rtol == 0);
      std::fputs(r.report.c_str(), stdout);
      return r.ok ? 0 : 1;
    }
    if (*c) {
      const mt::CompareResult r = mt::compare_runs(cmp);
      std::fputs(r.report.c_str(), stdout);
      return r.ok ? 0 : 1;
    }
  } catch (const mt::Error& err) {
    std::fprintf(stderr, "meshtrain: error: %s\n", err.what());
    return 1;
  } catch (const std::exception& err) {
    std::fprintf(stderr, "meshtrain: internal error: %s\n", err.what());
    return 2;
  } catch (...) {  // no exception leaves main unreported
    std::fprintf(stderr, "meshtrain: internal error: an exception of unknown type\n");
    return 2;
  }
  return 0;
}
