// meshtrain_checkpoint_bench: each rank's checkpoint write and read against
// this machine's plain sequential file write (+ fsync) and read of the same
// bytes, interleaved in one run so that the load of a shared machine falls on
// both sides of each ratio (docs/BENCHMARKS.md, "Checkpoint I/O").
//
// A repeat: the checkpoint's snapshot, its write (the rank's safetensors file,
// fsync, rename, CRC32C) and its finalize (agreement, metadata, commit) of the
// model of --config as initialised; then the rank's file bytes written to a
// plain file with one write and an fsync; then load_checkpoint of that
// checkpoint (the slices' checksums checked on the way); then a plain read of the plain file. Reads come from
// the page cache when the machine has the memory, on both sides alike. Each rank prints the medians over the
// repeats. Run it under mpirun for several ranks.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_read.h"
#include "ckpt/checkpoint_slices.h"
#include "comm/runtime.h"
#include "config/config.h"
#include "core/error.h"
#include "core/file.h"
#include "core/threads.h"
#include "core/timer.h"
#include "train/run_mesh.h"
#include "train/train_model.h"

namespace mt::bench {
namespace {

namespace fs = std::filesystem;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Writes `bytes` to `path` with plain write calls and an fsync; seconds.
double plain_write(const std::string& path, const std::string& bytes) {
  const Timer t;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  MT_REQUIRE(fd >= 0, IoError, "cannot create ", path);
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    MT_REQUIRE(n > 0, IoError, "cannot write ", path);
    done += static_cast<size_t>(n);
  }
  MT_REQUIRE(::fsync(fd) == 0 && ::close(fd) == 0, IoError, "cannot flush ", path);
  return t.seconds();
}

struct Figures {
  std::vector<double> snapshot, write, finalize, plain_w, read, plain_r;
};

int run(const std::string& config, const std::vector<std::string>& sets, const std::string& dir,
        int repeats) {
  CommRuntime runtime(nullptr, nullptr);
  Group world = runtime.world();
  Config cfg = load_config(config, sets);
  set_num_threads(std::max(1, hardware_threads() / runtime.local_ranks()));
  const RunMesh mesh = make_run_mesh(cfg, &world);
  RunOptions opts;
  opts.quiet = true;
  opts.local_ranks = runtime.local_ranks();
  TrainModel model = make_train_model(cfg, opts, mesh);
  if (mesh.rank == 0) fs::remove_all(dir);  // checkpoints of an earlier run would be pruned last
  int64_t ready = 0;
  world.broadcast(&ready, 1, ElemType::i64, 0, "bench: folder cleared");
  fs::create_directories(dir);
  Figures f;
  int64_t bytes = 0;
  for (int r = 0; r < repeats; ++r) {
    const int64_t step = r + 1;
    Timer t;
    CheckpointSnapshot snap = snapshot_checkpoint(dir, step, model, mesh, cfg, {}, 1);
    f.snapshot.push_back(t.seconds());
    t.reset();
    write_checkpoint_files(snap, mesh.rank);
    f.write.push_back(t.seconds());
    t.reset();
    finalize_checkpoint(snap, mesh);
    f.finalize.push_back(t.seconds());
    const std::string ck = (fs::path(snap.final_dir)).string();
    const std::string shard = (fs::path(ck) / slice_file_name(mesh.rank)).string();
    const std::string data = read_file(shard);
    bytes = static_cast<int64_t>(data.size());
    const std::string plain = (fs::path(dir) / ("plain-" + std::to_string(mesh.rank) + ".bin")).string();
    f.plain_w.push_back(plain_write(plain, data));
    t.reset();
    CheckpointReader reader(ck);  // each slice's CRC32C checked as it is first read
    load_checkpoint(reader, model, mesh);
    f.read.push_back(t.seconds());
    t.reset();
    const std::string back = read_file(plain);
    f.plain_r.push_back(t.seconds());
    MT_REQUIRE(back == data, Error, "the plain file read back differs from what was written");
    fs::remove(plain);
  }
  const double mb = static_cast<double>(bytes) / 1e6;
  const double w = median(f.write), pw = median(f.plain_w), rd = median(f.read), pr = median(f.plain_r);
  std::printf(
      "rank %d of %d: %.0f MB | write %.0f MB/s, plain write+fsync %.0f MB/s, ratio %.2f | read %.0f MB/s, "
      "plain read %.0f MB/s, ratio %.2f | snapshot %.3f s, finalize %.3f s (medians of %d)\n",
      mesh.rank, mesh.world_size, mb, mb / w, mb / pw, pw / w, mb / rd, mb / pr, pr / rd, median(f.snapshot),
      median(f.finalize), repeats);
  return 0;
}

}  // namespace
}  // namespace mt::bench

int main(int argc, char** argv) {
  CLI::App app{"meshtrain_checkpoint_bench: checkpoint write/read against plain file I/O of the same bytes"};
  std::string config = "configs/bench.toml", dir;
  std::vector<std::string> sets;
  int repeats = 3;
  app.add_option("--config", config, "model and layout (TOML)");
  app.add_option("--set", sets, "section.key=value overrides (e.g. parallel.dp=2)");
  app.add_option("--dir", dir, "checkpoint folder on the disk under test")->required();
  app.add_option("--repeats", repeats, "interleaved repeats (medians are printed)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    return mt::bench::run(config, sets, dir, repeats);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtrain_checkpoint_bench: %s\n", e.what());
    return 1;
  }
}
