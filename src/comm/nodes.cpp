#include "comm/nodes.h"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "comm/context.h"
#include "comm/mpi_backend.h"
#include "core/error.h"

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

NodeSplit split_by_node(const Group& group) {
  const std::vector<int>& world_node = group.context().node_of_world_rank;
  MT_CHECK(!world_node.empty(), "split_by_node before the job's nodes are known");
  NodeSplit s;
  std::vector<int> first_world_node;  // per node index (group order), its world node
  std::vector<int> index_in_node(static_cast<size_t>(group.size()));
  for (int r = 0; r < group.size(); ++r) {
    const int wn = world_node[static_cast<size_t>(group.world_rank_of(r))];
    auto it = std::find(first_world_node.begin(), first_world_node.end(), wn);
    if (it == first_world_node.end()) {
      first_world_node.push_back(wn);
      s.node_ranks.push_back(0);
      it = first_world_node.end() - 1;
    }
    const int n = static_cast<int>(it - first_world_node.begin());
    s.node_of.push_back(n);
    index_in_node[static_cast<size_t>(r)] = s.node_ranks[static_cast<size_t>(n)]++;
  }
  const bool even =
      std::all_of(s.node_ranks.begin(), s.node_ranks.end(), [&](int c) { return c == s.node_ranks.front(); });
  if (!even) {
    std::string counts;
    for (size_t n = 0; n < s.node_ranks.size(); ++n)
      counts += (n ? ", " : "") + std::to_string(s.node_ranks[n]);
    MT_THROW(ConfigError, "the ", group.axis(), " group's ", group.size(), " ranks lie on ",
             s.node_ranks.size(), " nodes unevenly (", counts,
             " ranks per node): a split at the nodes needs the same number on each");
  }
  const int me = group.rank();
  s.node = group.split(s.node_of[static_cast<size_t>(me)], me, group.axis() + "@node");
  s.across = group.split(index_in_node[static_cast<size_t>(me)], s.node_of[static_cast<size_t>(me)],
                         group.axis() + "@across");
  return s;
}

}  // namespace mt
