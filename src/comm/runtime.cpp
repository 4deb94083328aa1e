#include "comm/runtime.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "comm/context.h"
#include "comm/lifeline.h"
#include "comm/mpi_backend.h"
#include "core/error.h"

namespace mt {

CommRuntime::CommRuntime(int* argc, char*** argv) {
  int finalized = 0;
  MT_MPI_CHECK(MPI_Finalized(&finalized));
  MT_REQUIRE(!finalized, Error, "MPI was already finalized: a process can start communication only once");
  int initialized = 0;
  MT_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    // FUNNELED: only the main thread calls MPI; OpenMP worker threads never do.
    int provided = 0;
    MT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    owns_mpi_ = true;
    MT_REQUIRE(provided >= MPI_THREAD_FUNNELED, Error, "MPI provides thread level ", provided,
               " but meshtrain needs MPI_THREAD_FUNNELED (", MPI_THREAD_FUNNELED, ")");
  }
  MT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  // Our own copy of the world, so that our traffic never matches a message
  // some other user of MPI_COMM_WORLD sends.
  MPI_Comm world = MPI_COMM_NULL;
  MT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world));
  world_ = Group(std::make_shared<MpiBackend>(world), std::make_shared<CommContext>(), "world");

  nodes_ = discover_nodes();
  world_.context().node_of_world_rank = nodes_.node_of_rank;  // every group's link (Group::link)
  world_.context().node_names = nodes_.names;                 // the watchdog's sides of a link
  const int my_node = nodes_.node_of_rank[static_cast<size_t>(world_.rank())];
  local_ranks_ =
      static_cast<int>(std::count(nodes_.node_of_rank.begin(), nodes_.node_of_rank.end(), my_node));
  const std::string off = start_lifeline(world_, nodes_);
  if (!off.empty()) {
    std::fprintf(stderr, "meshtrain: warning (rank %d): the lost-rank detector: %s\n", world_.rank(),
                 off.c_str());
  }
}

CommRuntime::~CommRuntime() {
  lifeline_goodbye();
  world_ = Group();  // frees our communicator while MPI still runs (other copies free nothing after Finalize)
  if (owns_mpi_) MPI_Finalize();
}

void agree_on_startup_errors(const Group& world, const std::optional<std::string>& error) {
  // Each failing rank contributes P - rank; the maximum names the lowest
  // failing rank (0 when none failed), so exactly one rank prints.
  const int P = world.size();
  const int me = world.rank();
  int64_t flag = error ? P - me : 0;
  Group g = world;  // a Group is a value; the copy shares the communicator
  g.all_reduce(&flag, 1, "startup: agree on errors", ReduceOp::max);
  if (flag == 0) return;
  if (me == P - flag) {
    std::fprintf(stderr, "meshtrain: error: %s\n", error->c_str());
    std::fflush(stderr);
  }
  // Every rank got here, so a collective shutdown cannot hang.
  MPI_Finalize();
  std::exit(1);
}

void abort_job(const Group& world, const std::string& message, int status) {
  int P = 1;
  int me = 0;
  try {
    P = world.size();
    me = world.rank();
  } catch (const std::exception&) {
    // An empty group: report without a rank.
  }
  if (P > 1) {
    std::fprintf(stderr, "meshtrain: error (rank %d of %d): %s\n", me, P, message.c_str());
  } else {
    std::fprintf(stderr, "meshtrain: error: %s\n", message.c_str());
  }
  std::fflush(stderr);
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  // Alone in the world there is no other rank to end: shut MPI down quietly.
  lifeline_goodbye();  // the peers end by our MPI_Abort: they must not report this rank lost
  if (initialized && !finalized) {
    if (P > 1)
      MPI_Abort(MPI_COMM_WORLD, status);
    else
      MPI_Finalize();
  }
  std::_Exit(status);
}

std::string describe_current_exception(int* status) {
  try {
    throw;
  } catch (const Error& e) {
    *status = 1;
    return e.what();
  } catch (const std::bad_alloc&) {
    *status = 2;
    return "out of memory (std::bad_alloc)";
  } catch (const std::exception& e) {
    *status = 2;
    return std::string("internal error: ") + e.what();
  } catch (...) {
    *status = 2;
    return "internal error: an exception of unknown type";
  }
}

}  // namespace mt
