// `meshtrain calibrate`: measures this machine (under mpirun, its collectives
// too) and writes the machine description `plan --machine FILE` reads.
#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "cli/layout_command.h"
#include "comm/runtime.h"
#include "config/config.h"
#include "core/atomic_dir.h"
#include "core/error.h"
#include "core/threads.h"
#include "plan/calibrate.h"

namespace mt {

int run_calibrate_command(const CalibrateArgs& a) {
  CommRuntime runtime(nullptr, nullptr);
  Group world = runtime.world();
  plan::CalibrateOptions o;
  plan::Machine m;
  const auto setup = [&] {
    MT_REQUIRE(!a.out.empty(), ConfigError, "--out is required");
    if (world.rank() == 0) check_file_writable(a.out, "--out");  // before minutes of measuring
    MT_REQUIRE(a.seconds > 0 && a.seconds <= 10, ConfigError, "--seconds (", a.seconds,
               ") must be in (0, 10]");
    if (!a.config.empty()) {
      const Config cfg = load_config(a.config, {});
      o.has_model = true;
      o.model = cfg.model;
      o.tokens = cfg.train.microbatch_size * cfg.train.seq_len;
      o.microbatch = cfg.train.microbatch_size;
      o.seq_len = cfg.train.seq_len;
    }
    o.seconds_per_shape = a.seconds;
    set_num_threads(std::max(1, hardware_threads() / std::max(1, runtime.local_ranks())));
  };
  const auto body = [&] {
    m = plan::calibrate(world, o);
    if (world.rank() != 0) return;
    std::ofstream out(a.out);
    MT_REQUIRE(out && (out << plan::machine_to_json(m)), IoError, "cannot write ", a.out);
    std::printf("wrote %s: %zu GEMM shapes (1024^3: %.1f GFLOP/s), memory %.2f GB/s, %zu collective fits\n",
                a.out.c_str(), m.gemm.size(), m.peak_flops / 1e9, m.memory_bytes_per_s / 1e9,
                m.collectives.size());
    if (m.devices_per_node < (1 << 20))  // the world spanned nodes: the link between them too
      std::printf(
          "  %d ranks a node; the link between nodes: alpha %.1f us, %.3g B/s, %s by a node's ranks\n",
          m.devices_per_node, m.inter.alpha_s * 1e6, m.inter.bytes_per_s,
          m.shared_link ? "shared" : "not shared");
  };
  return run_on_every_rank(world, setup, body);
}

}  // namespace mt
