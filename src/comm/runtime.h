// The process's place in the job: MPI start-up and shutdown, the world group,
// and the rules for ending a job on an error.
#pragma once

#include <optional>
#include <string>

#include "comm/group.h"
#include "comm/nodes.h"

namespace mt {

class CommRuntime {
 public:
  // Initialises MPI (a process started without mpirun is a world of one).
  CommRuntime(int* argc, char*** argv);
  ~CommRuntime();  // MPI_Finalize
  CommRuntime(const CommRuntime&) = delete;
  CommRuntime& operator=(const CommRuntime&) = delete;

  Group world() const { return world_; }
  // Ranks of this job on this machine (MPI_COMM_TYPE_SHARED): threads per rank
  // default to cores ÷ this.
  int local_ranks() const { return local_ranks_; }
  // Every rank's node, as MPI reports them (nodes.h).
  const NodeMap& nodes() const { return nodes_; }

 private:
  Group world_;
  int local_ranks_ = 1;
  NodeMap nodes_;
  bool owns_mpi_ = false;  // this object initialised MPI, so it finalises it
};

// Start-up agreement on errors found by validation. Every rank calls it once
// with its own error (or none). If no rank failed it returns. Otherwise the
// lowest failing rank prints "meshtrain: error: <message>" (once, whatever the
// number of ranks), and every rank exits with status 1 — no hang.
void agree_on_startup_errors(const Group& world, const std::optional<std::string>& error);

// An error on one rank in the middle of a run: print it (naming the rank when
// the world has more than one) and end every rank of the job, non-zero. A
// world of one ends with the message alone (no MPI_Abort, whose banner would
// follow it).
[[noreturn]] void abort_job(const Group& world, const std::string& message, int status = 1);

// The exception in flight (call from a catch block) as a message and exit
// status: meshtrain's own errors give their text and 1; anything else (the
// standard library's, std::bad_alloc, an unknown type) is named as such and
// gives 2, so that no exception on any rank goes unreported.
std::string describe_current_exception(int* status);

}  // namespace mt
