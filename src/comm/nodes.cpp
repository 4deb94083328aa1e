#include "comm/nodes.h"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "comm/mpi_backend.h"

namespace mt {

namespace {
// What each rank contributes: the world rank of its node's lowest rank, and its
// processor name.
struct RankNode {
  int leader = 0;
  std::array<char, MPI_MAX_PROCESSOR_NAME> name{};
};
}  // namespace

NodeMap discover_nodes() {
  int me = 0, P = 1;
  MT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  MT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &P));
  MPI_Comm node = MPI_COMM_NULL;
  MT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node));
  RankNode mine;
  // Key = world rank, so the node's rank 0 is its lowest world rank.
  MT_MPI_CHECK(MPI_Allreduce(&me, &mine.leader, 1, MPI_INT, MPI_MIN, node));
  MT_MPI_CHECK(MPI_Comm_free(&node));
  int len = 0;
  MT_MPI_CHECK(MPI_Get_processor_name(mine.name.data(), &len));
  std::vector<RankNode> all(static_cast<size_t>(P));
  MT_MPI_CHECK(MPI_Allgather(&mine, sizeof(RankNode), MPI_BYTE, all.data(), sizeof(RankNode), MPI_BYTE,
                             MPI_COMM_WORLD));
  NodeMap m;
  m.node_of_rank.assign(static_cast<size_t>(P), -1);
  std::vector<int> leaders;  // node index → its lowest world rank
  for (int r = 0; r < P; ++r) {
    const int leader = all[static_cast<size_t>(r)].leader;
    auto it = std::find(leaders.begin(), leaders.end(), leader);
    if (it == leaders.end()) {
      leaders.push_back(leader);
      const char* raw = all[static_cast<size_t>(leader)].name.data();
      std::string name(raw, strnlen(raw, MPI_MAX_PROCESSOR_NAME));
      if (std::find(m.names.begin(), m.names.end(), name) != m.names.end())
        name.append(1, '#').append(std::to_string(m.names.size()));
      m.names.push_back(name);
      it = leaders.end() - 1;
    }
    m.node_of_rank[static_cast<size_t>(r)] = static_cast<int>(it - leaders.begin());
  }
  return m;
}

}  // namespace mt
